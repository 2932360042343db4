#!/usr/bin/env bash
# Benchmark: hook wall time for a domain with one vGPU, against the daemon on the simulated
# host over a private system-like bus: `prepare begin` (claim: create the mdev from its profile)
# and `release end` (destroy it), alternating. Release builds of the hook and the daemon.
#
# Usage: bench/hook/one-vgpu.sh [CYCLES]
#        (HOOK=... and DAEMON=... use existing binaries instead of building release ones)
set -euo pipefail
cd "$(dirname "$0")/../.."

cycles=${1:-200}
if [ -z "${HOOK:-}" ]; then
  cargo build --release -q -p libvirt-hooks --bin mdev-manager-hook
fi
if [ -z "${DAEMON:-}" ]; then
  cargo build --release -q -p mdev-manager --bin mdev-manager
fi
hook=$(realpath "${HOOK:-target/release/mdev-manager-hook}")
daemon=$(realpath "${DAEMON:-target/release/mdev-manager}")
work=$(mktemp -d)
bus_pid=
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
  [ -n "$bus_pid" ] && kill "$bus_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Debian's system bus configuration, moved into $work, with the project's policy (as the
# end-to-end tests do; see tests/src/bus.rs).
mkdir -p "$work/policy"
cp packaging/dbus/org.mdevmanager.VGpu1.conf "$work/policy/"
sed -e "s|<listen>.*</listen>|<listen>unix:path=$work/bus</listen>|" \
    -e '/<user>/d' -e '/<pidfile>/d' -e '/<fork\/>/d' -e '/<syslog\/>/d' \
    -e '/<include.*\/etc\/dbus-1\/system.conf/d' \
    -e "s|<includedir>system.d</includedir>|<includedir>/usr/share/dbus-1/system.d</includedir><includedir>$work/policy</includedir>|" \
    /usr/share/dbus-1/system.conf >"$work/system.conf"
bus_pid=$(dbus-daemon --config-file="$work/system.conf" --fork --print-pid)
export DBUS_SYSTEM_BUS_ADDRESS="unix:path=$work/bus"
MDEV_MANAGER_LOG=warn "$daemon" --simulate --state-dir "$work/state" &
daemon_pid=$!
for _ in $(seq 100); do
  dbus-send --system --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
    org.freedesktop.DBus.NameHasOwner string:org.mdevmanager.VGpu1 2>/dev/null | grep -q true && break
  sleep 0.1
done

cat >"$work/domain.xml" <<XML
<domain type='kvm'>
  <name>bench</name>
  <uuid>4dea22b3-1d52-d8f3-2516-782e98ab3fa0</uuid>
  <metadata>
    <vgpu:vgpus xmlns:vgpu="https://mdev-manager.org/xmlns/vgpu/1">
      <vgpu:vgpu profile='nvidia-t4-2q' uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/>
    </vgpu:vgpus>
  </metadata>
  <devices>
    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
      <source>
        <address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/>
      </source>
    </hostdev>
  </devices>
</domain>
XML

python3 - "$cycles" "$hook" "$work/domain.xml" <<'PY'
import os, statistics, sys, time
cycles, hook, xml = int(sys.argv[1]), sys.argv[2], sys.argv[3]
env = dict(os.environ)
times = {"prepare begin": [], "release end": []}
for _ in range(cycles):
    for operation in times:
        fd = os.open(xml, os.O_RDONLY)
        start = time.perf_counter_ns()
        pid = os.posix_spawn(hook, [hook, "bench", *operation.split(), "-"], env,
                             file_actions=[(os.POSIX_SPAWN_DUP2, fd, 0)])
        _, status = os.waitpid(pid, 0)
        elapsed = (time.perf_counter_ns() - start) / 1e6
        os.close(fd)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"hook {operation} failed with status {status}")
        times[operation].append(elapsed)
print(f"libvirt hook, one vGPU on the simulated host: {cycles} prepare/release cycles; "
      f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
for operation, values in times.items():
    values.sort()
    print(f"  {operation:<14} median {statistics.median(values):7.2f} ms  "
          f"p90 {values[len(values) * 9 // 10]:7.2f} ms  min {values[0]:7.2f} ms")
PY
