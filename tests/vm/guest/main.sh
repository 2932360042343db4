#!/bin/bash
# The VM tier's guest side: PID 1 after the initramfs hands over. Loads the sample mdev drivers
# and runs the check groups against the real kernel's sysfs and VFIO, appending one line per
# check to $VMTIER_OUT/results.tsv (PASS|FAIL|SKIP <tab> name <tab> detail), then powers off.
#
# Each group is a function `group_<name>`; add a group by writing the function and listing it
# in CHECK_GROUPS. `vmtier.only=a,b` on the kernel command line runs only those groups.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The harness runs a snapshot of tests/vm/guest (out/guest) so that editing the scripts during a
# run cannot change them under bash, which reads a script as it goes; it names the repository.
repo="$(cat "$here/repo")"
out="${VMTIER_OUT:?}"
results="$out/results.tsv"
bin="$out/bin"
: >"$results"
# shellcheck source=lib.sh
source "$here/lib.sh"

CHECK_GROUPS=(modules smoke sriov probe held conformance engine product libvirt nodedev passthrough torture unload)

power_off() {
  dmesg >"$out/dmesg.log" 2>&1
  sync
  echo o >/proc/sysrq-trigger
  sleep 30
}
trap power_off EXIT

only=""
for arg in $(cat /proc/cmdline); do
  case "$arg" in vmtier.only=*) only=",${arg#vmtier.only=}," ;; esac
done

# shellcheck source=checks.sh
source "$here/checks.sh"

echo "vmtier: guest up after $(cut -d' ' -f1 /proc/uptime) s"
for group in "${CHECK_GROUPS[@]}"; do
  if [ -n "$only" ] && [[ "$only" != *",$group,"* ]] && [ "$group" != modules ]; then
    echo "vmtier: group $group NOT run (vmtier.only=${only:1:-1})"
    continue
  fi
  started="$(cut -d' ' -f1 /proc/uptime)"
  if declare -F "group_$group" >/dev/null; then
    "group_$group"
  else
    fail "$group" "no function group_$group in checks.sh"
  fi
  echo "vmtier: group $group took $(awk -v s="$started" '{ printf "%.1f", $1 - s }' /proc/uptime) s"
done
touch "$out/done"
