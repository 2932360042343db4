# Helpers for the guest checks (sourced by main.sh).

pass() { printf 'PASS\t%s\t%s\n' "$1" "${2:-}" >>"$results"; echo "vmtier: ok   $1 ${2:-}"; }
fail() { printf 'FAIL\t%s\t%s\n' "$1" "$2" >>"$results"; echo "vmtier: FAIL $1: $2"; }
skip() { printf 'SKIP\t%s\t%s\n' "$1" "$2" >>"$results"; echo "vmtier: skip $1: $2"; }

# check NAME COMMAND...: PASS when the command succeeds; its last output line is the detail.
check() {
  local name="$1" output
  shift
  if output="$("$@" 2>&1)"; then
    pass "$name" "$(tail -n1 <<<"$output")"
  else
    fail "$name" "$(tr '\n' ' ' <<<"$output")"
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
