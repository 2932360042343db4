# Helpers for the guest checks (sourced by main.sh).

pass() { printf 'PASS\t%s\t%s\n' "$1" "${2:-}" >>"$results"; echo "vmtier: ok   $1 ${2:-}"; }
fail() { printf 'FAIL\t%s\t%s\n' "$1" "$2" >>"$results"; echo "vmtier: FAIL $1: $2"; }
# skip NAME WHY: a check that could not run. Only a name listed in expected-skips (next to this
# file) is recorded as SKIP; any other skip is a FAIL, since a tier that passes by skipping
# proves nothing (issue 14).
skip() {
  if expected_skip "$1"; then
    printf 'SKIP\t%s\t%s\n' "$1" "$2" >>"$results"
    echo "vmtier: skip $1: $2 (an expected skip)"
  else
    fail "$1" "skipped, and not listed in expected-skips: $2"
  fi
}

# expected_skip NAME: NAME is the first field of a line of expected-skips.
expected_skip() {
  awk -v name="$1" '$1 !~ /^#/ && $1 == name { found = 1 } END { exit !found }' \
    "${expected_skips:-$here/expected-skips}" 2>/dev/null
}

# check NAME COMMAND...: PASS when the command succeeds (its last output line is the detail),
# FAIL with the whole output otherwise; returns the command's success.
check() {
  local name="$1" output started status=0
  shift
  started="$(cut -d' ' -f1 /proc/uptime)"
  output="$("$@" 2>&1)" || status=$?
  echo "vmtier: $name took $(awk -v s="$started" '{ printf "%.1f", $1 - s }' /proc/uptime) s"
  if [ "$status" = 0 ]; then
    pass "$name" "$(tail -n1 <<<"$output")"
  else
    fail "$name" "$(tr '\n' ' ' <<<"$output")"
    return 1
  fi
}

new_uuid() { cat /proc/sys/kernel/random/uuid; }

# sysfs_write PATH DATA: one open+write, like the engine does; prints OK or the errno name.
sysfs_write() {
  python3 - "$1" "$2" <<'PY'
import errno, os, sys
path, data = sys.argv[1], sys.argv[2].encode()
try:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}

# expect_write EXPECTED PATH DATA: fails (with both answers) unless the write gives EXPECTED.
expect_write() {
  local expected="$1" path="$2" data="$3" got
  got="$(sysfs_write "$path" "$data")"
  if [ "$got" != "$expected" ]; then
    echo "writing '$data' to $path: expected $expected, got $got"
    return 1
  fi
  echo "writing '$data' to $path: $got"
}

# expect_equal WHAT EXPECTED ACTUAL
expect_equal() {
  if [ "$2" != "$3" ]; then
    echo "$1: expected '$2', got '$3'"
    return 1
  fi
  echo "$1: $3"
}

mdev_type_dir() { echo "/sys/class/mdev_bus/$1/mdev_supported_types/$2"; }
available() { cat "$(mdev_type_dir "$1" "$2")/available_instances"; }
mdev_group() { basename "$(readlink "/sys/bus/mdev/devices/$1/iommu_group")"; }

# create_mdev PARENT TYPE: prints the new UUID.
create_mdev() {
  local uuid
  uuid="$(new_uuid)"
  echo "$uuid" >"$(mdev_type_dir "$1" "$2")/create" || return 1
  echo "$uuid"
}

remove_all_mdevs() {
  local dev
  for dev in /sys/bus/mdev/devices/*; do
    [ -e "$dev/remove" ] && echo 1 >"$dev/remove"
  done
  return 0
}

# The QEMU nvme PF (1b36:0010) the tier's VM carries.
nvme_pf() {
  local dev
  for dev in /sys/bus/pci/devices/*; do
    if [ "$(cat "$dev/vendor")" = 0x1b36 ] && [ "$(cat "$dev/device")" = 0x0010 ] && [ -e "$dev/sriov_totalvfs" ]; then
      basename "$dev"
      return 0
    fi
  done
  return 1
}

# wait_until SECONDS COMMAND...: polls COMMAND every 0.1 s; fails when it has not succeeded
# within SECONDS.
wait_until() {
  local limit="$1" deadline
  shift
  # Bounded by elapsed time, not by attempts: one attempt may itself take seconds.
  deadline="$(awk -v l="$limit" '{ printf "%d", $1 + l }' /proc/uptime)"
  while :; do
    "$@" && return 0
    [ "$(awk '{ printf "%d", $1 }' /proc/uptime)" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# start_holder SYSFS_DIR: holds the VFIO device open in the background (see hold_vfio.py);
# sets HOLDER_PID and HOLDER_RELEASE. Fails when the holder does not get the device in time.
start_holder() {
  HOLDER_RELEASE="/tmp/release.$RANDOM"
  local ready="/tmp/held.$RANDOM"
  python3 "$here/hold_vfio.py" "$1" "$HOLDER_RELEASE" 60 >"$ready" 2>&1 &
  HOLDER_PID=$!
  if ! wait_until 20 grep -q '^held ' "$ready"; then
    echo "the holder never got $1: $(cat "$ready")"
    kill "$HOLDER_PID" 2>/dev/null
    return 1
  fi
}

release_holder() {
  touch "$HOLDER_RELEASE"
  wait "$HOLDER_PID" 2>/dev/null
}

# running PID: alive and not a zombie (this script is PID 1, so orphans end up as its children).
running() {
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

present() { if [ -e "$1" ]; then echo present; else echo absent; fi; }

# ensure_vf_bound: makes sure the nvme PF has VFs and virtfn0 is bound to vfio-pci (so a group
# can run alone); prints virtfn0's PCI address.
ensure_vf_bound() {
  local pf dir vf
  pf="$(nvme_pf)" || { echo "no nvme PF" >&2; return 1; }
  dir="/sys/bus/pci/devices/$pf"
  [ -e "$dir/driver" ] || modprobe nvme || return 1
  if [ "$(cat "$dir/sriov_numvfs")" = 0 ]; then
    echo 0 >"$dir/sriov_drivers_autoprobe" && echo 2 >"$dir/sriov_numvfs" || return 1
  fi
  vf="$(basename "$(readlink "$dir/virtfn0")")"
  if [ "$(basename "$(readlink "/sys/bus/pci/devices/$vf/driver" 2>/dev/null)")" != vfio-pci ]; then
    echo vfio-pci >"/sys/bus/pci/devices/$vf/driver_override" && echo "$vf" >/sys/bus/pci/drivers_probe || return 1
  fi
  echo "$vf"
}

# Checks run in a subshell (check captures their output), so what one check learns for a later
# one is kept in files: remember NAME VALUE / recall NAME.
state_dir=/run/vmtier-state
remember() { mkdir -p "$state_dir" && printf '%s\n' "$2" >"$state_dir/$1"; }
recall() { cat "$state_dir/$1" 2>/dev/null; }

# sysfs_open_errno PATH: opens read-write; prints OK or the errno name.
sysfs_open_errno() {
  python3 -c 'import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDWR)); print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))' "$1"
}
