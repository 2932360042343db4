#!/bin/bash
# Guest side of the real-kernel benchmark (item 5): runs as the guest's PID 1 script, handed
# over by the VM tier's tests/vm/init.sh (vmtier.script=). Loads mtty, runs
# `mdev-bench guest` against the real sysfs, writes the section to $VMTIER_OUT, powers off.
set -u
out="${VMTIER_OUT:?}"
rounds=20
for arg in $(cat /proc/cmdline); do
  case "$arg" in vmbench.rounds=*) rounds="${arg#vmbench.rounds=}" ;; esac
done
power_off() {
  sync
  echo o >/proc/sysrq-trigger
  sleep 30
}
trap power_off EXIT
modprobe vfio-pci && modprobe mtty || echo "modprobe failed" >"$out/vm-bench.log"
echo "vmbench: guest up after $(cut -d' ' -f1 /proc/uptime) s"
# Run the binaries from the guest's tmpfs, not from the results share: that is 9p mounted
# sync without a page cache, where every exec pages the binary in over virtio again (about
# 2 s per vgpuctl process under TCG, against 0.5 s from tmpfs), which measured the share.
bin=/run/vmbench-bin
mkdir -p "$bin" && cp "$out"/bin/* "$bin"/ || echo "cannot copy the binaries to $bin" >>"$out/vm-bench.log"
"$bin/mdev-bench" guest --rounds "$rounds" --bin-dir "$bin" \
  >"$out/vm-bench.md" 2>>"$out/vm-bench.log"
echo $? >"$out/vm-bench.status"
echo "vmbench: done after $(cut -d' ' -f1 /proc/uptime) s"
