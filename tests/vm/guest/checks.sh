# The check groups (sourced by main.sh). Each group_<name> records one line per check.

# Loads the sample parents with the topology the simulated host mirrors
# (mdev-sim/topologies: mtty, mbochs count=64, mdpy count=4) and VFIO.
group_modules() {
  check modules.vfio_pci modprobe vfio-pci
  check modules.mtty modprobe mtty
  check modules.mbochs modprobe mbochs count=64
  check modules.mdpy modprobe mdpy count=4
  check modules.parents ls -d /sys/class/mdev_bus/mtty /sys/class/mdev_bus/mbochs /sys/class/mdev_bus/mdpy
}

# Lifecycle through the real sysfs ABI, with the errno the kernel answers.
group_smoke() {
  check smoke.types_initial smoke_types_initial
  check smoke.create_remove smoke_create_remove
  check smoke.malformed_uuid expect_write EINVAL "$(mdev_type_dir mtty mtty-1)/create" not-a-uuid
  check smoke.duplicate_across_parents smoke_duplicate
  check smoke.remove_values smoke_remove_values
  check smoke.exhaust_mtty smoke_exhaust mtty mtty-2 12 ENOSPC
  check smoke.exhaust_mbochs smoke_exhaust mbochs mbochs-large 1 ENOSPC
  check smoke.exhaust_mdpy smoke_exhaust mdpy mdpy-vga 4 EUSERS
  remove_all_mdevs
}

smoke_types_initial() {
  # One `|| return 1` per comparison: a chain ending in `if ... fi` and an echo would let all
  # but the last fail unnoticed (issue 14).
  expect_equal "mtty-1 available" 24 "$(available mtty mtty-1)" || return 1
  expect_equal "mtty-2 available" 12 "$(available mtty mtty-2)" || return 1
  expect_equal "mbochs-small available" 16 "$(available mbochs mbochs-small)" || return 1
  expect_equal "mbochs-medium available" 4 "$(available mbochs mbochs-medium)" || return 1
  expect_equal "mbochs-large available" 1 "$(available mbochs mbochs-large)" || return 1
  expect_equal "mdpy-vga available" 4 "$(available mdpy mdpy-vga)" || return 1
  expect_equal "mtty-1 device_api" vfio-pci "$(cat "$(mdev_type_dir mtty mtty-1)/device_api")" || return 1
  expect_equal "mbochs-small description" "virtual display, 4 MB video memory" \
    "$(cat "$(mdev_type_dir mbochs mbochs-small)/description")" || return 1
  if [ -e "$(mdev_type_dir mtty mtty-1)/description" ]; then
    echo "mtty-1 has a description file; the reference says it has none"
    return 1
  fi
  echo "initial available_instances, device_api, description as expected"
}

smoke_create_remove() {
  local uuid group
  uuid="$(create_mdev mtty mtty-1)" || { echo "create on mtty-1 failed"; return 1; }
  [ -d "/sys/bus/mdev/devices/$uuid" ] || { echo "no /sys/bus/mdev/devices/$uuid"; return 1; }
  group="$(mdev_group "$uuid")"
  [ -c "/dev/vfio/$group" ] || { echo "no /dev/vfio/$group for $uuid"; return 1; }
  expect_equal "mtty-1 available after one" 23 "$(available mtty mtty-1)" >/dev/null || return 1
  expect_equal "mtty-2 available after one mtty-1" 11 "$(available mtty mtty-2)" >/dev/null || return 1
  expect_equal "mdev_type of $uuid" mtty-1 "$(basename "$(readlink "/sys/bus/mdev/devices/$uuid/mdev_type")")" >/dev/null || return 1
  expect_write OK "/sys/bus/mdev/devices/$uuid/remove" 1 >/dev/null || return 1
  [ ! -e "/sys/bus/mdev/devices/$uuid" ] || { echo "$uuid still present after remove"; return 1; }
  [ ! -e "/dev/vfio/$group" ] || { echo "/dev/vfio/$group still present after remove"; return 1; }
  expect_write ENOENT "/sys/bus/mdev/devices/$uuid/remove" 1 >/dev/null || return 1
  echo "created $uuid (group $group, /dev/vfio/$group), removed it; second remove: ENOENT"
}

smoke_duplicate() {
  local uuid
  uuid="$(create_mdev mtty mtty-1)" || return 1
  expect_write EEXIST "$(mdev_type_dir mtty mtty-2)/create" "$uuid" || return 1
  expect_write EEXIST "$(mdev_type_dir mbochs mbochs-small)/create" "$uuid" || return 1
  echo 1 >"/sys/bus/mdev/devices/$uuid/remove"
  echo "the same UUID on another type and another parent: EEXIST"
}

smoke_remove_values() {
  local uuid
  uuid="$(create_mdev mdpy mdpy-vga)" || return 1
  expect_write OK "/sys/bus/mdev/devices/$uuid/remove" 0 >/dev/null || return 1
  [ -d "/sys/bus/mdev/devices/$uuid" ] || { echo "remove with 0 removed $uuid"; return 1; }
  expect_write EINVAL "/sys/bus/mdev/devices/$uuid/remove" x >/dev/null || return 1
  expect_write OK "/sys/bus/mdev/devices/$uuid/remove" 1 >/dev/null || return 1
  echo "remove: 0 is a no-op, x is EINVAL, 1 removes"
}

# smoke_exhaust PARENT TYPE COUNT ERRNO: COUNT creates succeed, the next one gives ERRNO.
smoke_exhaust() {
  local parent="$1" type="$2" count="$3" errno="$4" i
  for ((i = 0; i < count; i++)); do
    create_mdev "$parent" "$type" >/dev/null || { echo "create $((i + 1)) of $count on $type failed"; return 1; }
  done
  expect_equal "$type available when full" 0 "$(available "$parent" "$type")" >/dev/null || return 1
  expect_write "$errno" "$(mdev_type_dir "$parent" "$type")/create" "$(new_uuid)" >/dev/null || return 1
  remove_all_mdevs
  echo "$count on $type, then $errno"
}

# SR-IOV on QEMU's nvme controller: the PF answers before and after its driver is bound.
group_sriov() {
  local pf
  pf="$(nvme_pf)" || { fail sriov.pf "no nvme PF 1b36:0010 with SR-IOV"; return; }
  local dir="/sys/bus/pci/devices/$pf"
  check sriov.totalvfs expect_equal "sriov_totalvfs of $pf" 4 "$(cat "$dir/sriov_totalvfs")"
  check sriov.no_driver_enoent expect_write ENOENT "$dir/sriov_numvfs" 1
  check sriov.modprobe_nvme modprobe nvme
  check sriov.above_total_erange expect_write ERANGE "$dir/sriov_numvfs" 5
  check sriov.not_a_number_einval expect_write EINVAL "$dir/sriov_numvfs" abc
  check sriov.autoprobe_off expect_write OK "$dir/sriov_drivers_autoprobe" 0
  check sriov.enable_two sriov_enable "$dir" 2
  check sriov.change_while_enabled_ebusy expect_write EBUSY "$dir/sriov_numvfs" 3
  check sriov.bind_vfio_pci sriov_bind_vf0 "$dir"
  check sriov.second_bind_ebusy expect_write EBUSY /sys/bus/pci/drivers/vfio-pci/bind "$(basename "$(readlink "$dir/virtfn0")")"
  check sriov.bogus_probe_enodev expect_write ENODEV /sys/bus/pci/drivers_probe 0000:7f:1f.7
}

sriov_enable() {
  local dir="$1" count="$2" i
  expect_write OK "$dir/sriov_numvfs" "$count" >/dev/null || return 1
  for ((i = 0; i < count; i++)); do
    [ -L "$dir/virtfn$i" ] || { echo "no virtfn$i after enabling $count"; return 1; }
    [ -L "$dir/virtfn$i/iommu_group" ] || { echo "virtfn$i has no IOMMU group"; return 1; }
  done
  expect_equal "sriov_numvfs" "$count" "$(cat "$dir/sriov_numvfs")"
}

sriov_bind_vf0() {
  local dir="$1" vf group
  vf="$(basename "$(readlink "$dir/virtfn0")")"
  expect_write OK "/sys/bus/pci/devices/$vf/driver_override" vfio-pci >/dev/null || return 1
  expect_write OK /sys/bus/pci/drivers_probe "$vf" >/dev/null || return 1
  expect_equal "driver of $vf" vfio-pci "$(basename "$(readlink "/sys/bus/pci/devices/$vf/driver")")" >/dev/null || return 1
  group="$(basename "$(readlink "/sys/bus/pci/devices/$vf/iommu_group")")"
  [ -c "/dev/vfio/$group" ] || { echo "no /dev/vfio/$group for $vf"; return 1; }
  echo "VF $vf bound to vfio-pci, /dev/vfio/$group"
}

# The VFIO preflight probe on an mtty mdev, an mbochs mdev and the nvme VF, with KVM (TCG
# emulates AMD SVM, so kvm_amd gives the guest a /dev/kvm): every step must be ok.
group_probe() {
  check probe.kvm_amd probe_load_kvm
  local uuid
  if uuid="$(create_mdev mtty mtty-1)"; then
    check probe.mtty probe_all_ok "$uuid"
  else
    fail probe.mtty "cannot create an mtty-1 mdev"
  fi
  if uuid="$(create_mdev mbochs mbochs-small)"; then
    check probe.mbochs probe_all_ok "$uuid"
  else
    fail probe.mbochs "cannot create an mbochs-small mdev"
  fi
  local vf
  if vf="$(ensure_vf_bound)"; then
    check probe.nvme_vf probe_all_ok "$vf"
  else
    fail probe.nvme_vf "cannot enable the nvme VFs and bind virtfn0 to vfio-pci"
  fi
  check probe.unbound_vf_refused probe_refuses_unbound
  remove_all_mdevs
}

probe_load_kvm() {
  modprobe kvm_amd || return 1
  [ -c /dev/kvm ] || { echo "kvm_amd loaded but no /dev/kvm"; return 1; }
  echo "/dev/kvm present"
}

# probe_all_ok TARGET: vfio-probe --kvm required --json must report every step ok.
probe_all_ok() {
  local target="$1" json="$out/probe-$1.json"
  "$bin/vfio-probe" --json --kvm required "$target" >"$json"
  local status=$?
  python3 - "$json" "$status" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
bad = [f"{s['step']}={s['status']} ({s['detail']})" for s in report["steps"] if s["status"] != "ok"]
dev = report["device"]
if bad or not report["ok"] or sys.argv[2] != "0":
    print("steps not ok: " + "; ".join(bad) + f"; exit {sys.argv[2]}")
    sys.exit(1)
print(f"{len(report['steps'])} steps ok, {dev['vendor_id']}:{dev['device_id']}, "
      f"{len(dev['regions'])} regions, max {dev['max_interrupts']} interrupts")
PY
}

# A VF not bound to vfio-pci: the probe must fail at resolve, naming the driver.
probe_refuses_unbound() {
  local pf vf output
  pf="$(nvme_pf)" || return 1
  [ -L "/sys/bus/pci/devices/$pf/virtfn1" ] || { echo "no virtfn1"; return 1; }
  vf="$(basename "$(readlink "/sys/bus/pci/devices/$pf/virtfn1")")"
  if output="$("$bin/vfio-probe" "$vf")"; then
    echo "probe of unbound VF $vf succeeded: $output"
    return 1
  fi
  grep -q "resolve .*FAILED.*not bound to any driver\|resolve .*FAILED.*bound to" <<<"$output" ||
    { echo "unexpected output: $output"; return 1; }
  echo "unbound VF $vf refused at resolve"
}

# mdev-conformance against the real sysfs; the host runs it on the simulated host and compares
# step by step (tests/vm/compare-conformance). The runner needs mtty, mbochs count=64,
# mdpy count=4, nvme and vfio-pci loaded, no VFs enabled, and leaves alone what it did not make.
group_conformance() {
  if [ ! -x "$bin/mdev-conformance" ]; then
    skip conformance.real "mdev-conformance is not built"
    return
  fi
  remove_all_mdevs
  modprobe nvme
  local pf
  if pf="$(nvme_pf)"; then
    echo 0 >"/sys/bus/pci/devices/$pf/sriov_numvfs"
  fi
  local status=0
  "$bin/mdev-conformance" --root / --json >"$out/conformance-real.json" 2>"$out/conformance-real.err" || status=$?
  # Exit 1 means a step differs from the runner's oracle; the host-side comparison decides.
  if [ "$status" -le 1 ] && [ -s "$out/conformance-real.json" ]; then
    pass conformance.real_run "exit status $status, report in conformance-real.json"
  else
    fail conformance.real_run "exit status $status: $(tail -n 3 "$out/conformance-real.err" | tr '\n' ' ')"
  fi
}

# The engine's scenarios (mdev_conformance::engine_scenarios: create/destroy, rollback,
# ownership, in-use refusal, claims, reconcile, last-instance race, VF bind) on the real kernel
# through `mdev-conformance --engine`, one result line per scenario. Same needs as conformance.
# The simulated host requires every scenario to pass; here a "skipped" one goes through `skip`,
# which is a FAIL unless expected-skips lists it.
group_engine() {
  if [ ! -x "$bin/mdev-conformance" ]; then
    skip engine.scenarios "mdev-conformance is not built"
    return
  fi
  remove_all_mdevs
  modprobe nvme
  local pf
  if pf="$(nvme_pf)"; then
    echo 0 >"/sys/bus/pci/devices/$pf/sriov_numvfs"
  fi
  local status=0 json="$out/engine-scenarios.json"
  "$bin/mdev-conformance" --engine --root / --json --scratch "$out/engine-scratch" \
    >"$json" 2>"$out/engine-scenarios.err" || status=$?
  if [ ! -s "$json" ]; then
    fail engine.scenarios "exit status $status: $(tail -n 3 "$out/engine-scenarios.err" | tr '\n' ' ')"
    return
  fi
  # The guest has no /dev/fd, so no process substitution: the lines go through a file.
  local lines="$out/engine-scenarios.tsv" verdict name detail
  python3 -c 'import json, sys
for s in json.load(open(sys.argv[1]))["scenarios"]:
    v = s["verdict"]
    kind, why = (v, "") if isinstance(v, str) else next(iter(v.items()))
    print(kind, s["name"], " ".join(str(why).split()), sep="\t")' "$json" >"$lines" ||
    { fail engine.scenarios "unreadable report $json"; return; }
  while IFS=$'\t' read -r verdict name detail; do
    case "$verdict" in
      passed) pass "engine.$name" ;;
      skipped) skip "engine.$name" "$detail" ;;
      *) fail "engine.$name" "$detail" ;;
    esac
  done <"$lines"
}

# What the kernel does while a VMM holds a device: a second open of the group is EBUSY, and
# remove (or disabling the VFs) waits until the device is closed.
group_held() {
  check held.group_open_ebusy held_group_busy
  check held.mdev_remove_waits_for_close held_mdev_remove
  check held.numvfs_zero_waits_for_close held_numvfs_zero
  remove_all_mdevs
}

held_group_busy() {
  local uuid group
  uuid="$(create_mdev mtty mtty-1)" || return 1
  group="$(mdev_group "$uuid")"
  start_holder "/sys/bus/mdev/devices/$uuid" || return 1
  local got
  got="$(python3 -c 'import os,sys,errno
try:
    os.open(sys.argv[1], os.O_RDWR); print("OK")
except OSError as e:
    print(errno.errorcode[e.errno])' "/dev/vfio/$group")"
  release_holder
  echo 1 >"/sys/bus/mdev/devices/$uuid/remove"
  expect_equal "second open of /dev/vfio/$group while held" EBUSY "$got"
}

held_mdev_remove() {
  local uuid writer
  uuid="$(create_mdev mtty mtty-1)" || return 1
  start_holder "/sys/bus/mdev/devices/$uuid" || return 1
  (echo 1 >"/sys/bus/mdev/devices/$uuid/remove") &
  writer=$!
  sleep 2
  if ! running "$writer"; then
    release_holder
    echo "remove of held $uuid returned at once"
    return 1
  fi
  # What stays visible while the remove waits (the simulated host must show the same).
  local group seen
  group="$(basename "$(readlink "/sys/class/mdev_bus/mtty/$uuid/iommu_group" 2>/dev/null)")"
  seen="bus link $(present "/sys/bus/mdev/devices/$uuid"), device dir $(present "/sys/class/mdev_bus/mtty/$uuid"), remove attr $(present "/sys/class/mdev_bus/mtty/$uuid/remove"), /dev/vfio/$group $(present "/dev/vfio/$group")"
  release_holder
  local expected="bus link absent, device dir present, remove attr absent, /dev/vfio/$group present"
  [ "$seen" = "$expected" ] || { echo "while remove waited: expected $expected; saw $seen"; return 1; }
  wait_until 30 eval '! running '"$writer" || { echo "remove still blocked 30 s after the close"; return 1; }
  wait "$writer" || { echo "remove failed after the close"; return 1; }
  [ ! -e "/sys/bus/mdev/devices/$uuid" ] || { echo "$uuid still present"; return 1; }
  echo "remove of held $uuid blocked >= 2 s (meanwhile: $seen), completed after the close"
}

held_numvfs_zero() {
  local pf vf writer
  vf="$(ensure_vf_bound)" || { echo "cannot enable the nvme VFs and bind virtfn0 to vfio-pci"; return 1; }
  pf="$(nvme_pf)" || return 1
  start_holder "/sys/bus/pci/devices/$vf" || return 1
  (echo 0 >"/sys/bus/pci/devices/$pf/sriov_numvfs") &
  writer=$!
  sleep 2
  if ! running "$writer"; then
    release_holder
    echo "sriov_numvfs=0 with $vf held returned at once"
    return 1
  fi
  release_holder
  wait_until 30 eval '! running '"$writer" || { echo "sriov_numvfs=0 still blocked 30 s after the close"; return 1; }
  wait "$writer" || { echo "sriov_numvfs=0 failed after the close"; return 1; }
  [ ! -e "/sys/bus/pci/devices/$pf/virtfn0" ] || { echo "virtfn0 still present"; return 1; }
  expect_equal "sriov_numvfs of $pf" 0 "$(cat "/sys/bus/pci/devices/$pf/sriov_numvfs")" >/dev/null || return 1
  echo "sriov_numvfs=0 with $vf held blocked >= 2 s, completed after the close"
}

# The product on the real kernel: a system bus, the daemon on the real sysfs, vgpuctl creating
# from the built-in sample profiles, a foreign mdev left alone, reconcile after a kill -9,
# SR-IOV through the service, and udev hotplug of a parent driver.
group_product() {
  if [ ! -x "$bin/mdev-manager" ] || [ ! -x "$bin/vgpuctl" ]; then
    skip product "mdev-manager or vgpuctl is not built"
    return
  fi
  remove_all_mdevs
  modprobe mtty && modprobe mbochs count=64 && modprobe mdpy count=4 && modprobe nvme
  check product.system_bus product_start_bus || return
  check product.udevd product_start_udevd
  check product.daemon_start product_start_daemon
  if ! running "$(recall daemon_pid)"; then
    fail product.daemon "the daemon is not running; see daemon.log"
    return
  fi
  check product.parents product_parents
  check product.create_from_profile product_create
  check product.second_daemon_refused product_second_daemon
  check product.no_capacity_changes_nothing product_no_capacity
  check product.foreign_mdev_left_alone product_foreign
  check product.reconcile_after_kill product_reconcile
  check product.sriov_through_service product_sriov
  check product.vf_bound_for_a_domain product_vf_for_domain
  check product.hotplug_parent product_hotplug
  check product.destroy_all product_destroy_all
  product_stop
}

vgpuctl() { timeout 60 "$bin/vgpuctl" --no-ask "$@"; }

product_start_bus() {
  mkdir -p /run/dbus /etc/dbus-1/system.d
  # The overlay root is the guest's own: installing the policy file touches nothing on the host.
  cp "$repo/packaging/dbus/org.mdevmanager.VGpu1.conf" /etc/dbus-1/system.d/ || return 1
  dbus-daemon --system --fork || return 1
  wait_until 10 test -S /run/dbus/system_bus_socket || { echo "no /run/dbus/system_bus_socket"; return 1; }
  echo "dbus-daemon --system running with the service's policy"
}

product_start_udevd() {
  [ -x /lib/systemd/systemd-udevd ] || { echo "no systemd-udevd on the host (package udev)"; return 1; }
  mkdir -p /run/udev
  /lib/systemd/systemd-udevd --daemon || return 1
  echo "systemd-udevd running"
}

# start_daemon: starts mdev-manager on the real host and waits until it answers. The bound is
# generous: a debug build's start-up reconcile under TCG took 16-25 s on a loaded host and more
# than 30 s with the host at load 20 (the libvirt group failed there on a 30 s bound).
start_daemon() {
  NO_COLOR=1 "$bin/mdev-manager" >>"$out/daemon.log" 2>&1 &
  remember daemon_pid $!
  wait_until 180 eval 'vgpuctl status >/dev/null 2>&1' || { echo "the daemon did not answer within 180 s"; return 1; }
}

product_start_daemon() {
  start_daemon || return 1
  echo "mdev-manager (pid $(recall daemon_pid)) answers vgpuctl status"
}

product_stop() {
  local pid
  pid="$(recall daemon_pid)"
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait_until 10 eval '! running '"$pid"
  remove_all_mdevs
}

parent_names() {
  vgpuctl --json parents | python3 -c 'import json,sys; print(" ".join(sorted(p["name"] for p in json.load(sys.stdin))))'
}

product_parents() {
  local names
  names="$(parent_names)" || return 1
  for want in mtty mbochs mdpy; do
    [[ " $names " == *" $want "* ]] || { echo "parent $want not listed: $names"; return 1; }
  done
  echo "parents: $names"
}

count_mdevs() { ls /sys/bus/mdev/devices | wc -l; }

product_create() {
  local uuids uuid
  uuids="$(vgpuctl create mbochs-small --count 2)" || { echo "create failed: $uuids"; return 1; }
  [ "$(wc -l <<<"$uuids")" = 2 ] || { echo "expected 2 UUIDs, got: $uuids"; return 1; }
  for uuid in $uuids; do
    [ "$(basename "$(readlink "/sys/bus/mdev/devices/$uuid/mdev_type" 2>/dev/null)")" = mbochs-small ] ||
      { echo "$uuid is not an mbochs-small mdev in sysfs"; return 1; }
  done
  echo "2 x mbochs-small: $(tr '\n' ' ' <<<"$uuids")"
}

product_no_capacity() {
  local before after output status=0
  before="$(count_mdevs)"
  # 8 of 64 MB are taken: mbochs-large (64 MB) cannot fit.
  output="$(vgpuctl create mbochs-large 2>&1)" || status=$?
  after="$(count_mdevs)"
  [ "$status" = 4 ] || { echo "expected exit 4 (no capacity), got $status: $output"; return 1; }
  [ "$before" = "$after" ] || { echo "mdev count changed from $before to $after"; return 1; }
  echo "exit 4: $(head -n1 <<<"$output")"
}

product_foreign() {
  local uuid output status=0
  uuid="$(create_mdev mtty mtty-1)" || return 1
  remember foreign_uuid "$uuid"
  output="$(vgpuctl destroy "$uuid" 2>&1)" || status=$?
  [ "$status" != 0 ] || { echo "vgpuctl destroyed $uuid, which the service did not create"; return 1; }
  [ -d "/sys/bus/mdev/devices/$uuid" ] || { echo "$uuid vanished"; return 1; }
  echo "destroy of hand-made $uuid refused (exit $status): $(head -n1 <<<"$output")"
}

product_reconcile() {
  local uuid
  uuid="$(vgpuctl create mbochs-small --autostart)" || { echo "create --autostart failed: $uuid"; return 1; }
  local pid
  pid="$(recall daemon_pid)"
  kill -9 "$pid"
  wait_until 10 eval '! running '"$pid" || { echo "the daemon survived kill -9"; return 1; }
  # While the service is down its persistent instance disappears.
  echo 1 >"/sys/bus/mdev/devices/$uuid/remove"
  start_daemon || return 1
  wait_until 30 test -d "/sys/bus/mdev/devices/$uuid" ||
    { echo "autostart instance $uuid was not recreated after the restart"; return 1; }
  local foreign
  foreign="$(recall foreign_uuid)"
  [ -z "$foreign" ] || [ -d "/sys/bus/mdev/devices/$foreign" ] || { echo "reconcile removed the foreign $foreign"; return 1; }
  vgpuctl show "$uuid" >/dev/null || { echo "vgpuctl show $uuid failed after the restart"; return 1; }
  echo "killed -9, removed $uuid behind its back, restarted: recreated; foreign mdev kept"
}

product_sriov() {
  local pf output
  pf="$(nvme_pf)" || return 1
  echo 0 >"/sys/bus/pci/devices/$pf/sriov_numvfs"
  output="$(vgpuctl sriov "$pf" --vfs 2 2>&1)" || { echo "vgpuctl sriov $pf --vfs 2: $output"; return 1; }
  [ "$(cat "/sys/bus/pci/devices/$pf/sriov_numvfs")" = 2 ] || { echo "sriov_numvfs is not 2"; return 1; }
  [ -L "/sys/bus/pci/devices/$pf/virtfn1" ] || { echo "no virtfn1"; return 1; }
  output="$(vgpuctl sriov "$pf" --vfs 0 2>&1)" || { echo "vgpuctl sriov $pf --vfs 0: $output"; return 1; }
  [ "$(cat "/sys/bus/pci/devices/$pf/sriov_numvfs")" = 0 ] || { echo "sriov_numvfs is not 0"; return 1; }
  echo "the service set $pf to 2 VFs and back to 0"
}

# A domain asks for a VF (what the libvirt hook sends at prepare): the service binds it to
# vfio-pci, the probe finds it usable by a VMM, and release gives it back (no driver).
product_vf_for_domain() {
  local pf vf domain=11111111-2222-4333-8444-555555555555 output driver
  pf="$(nvme_pf)" || return 1
  output="$(vgpuctl sriov "$pf" --vfs 2 2>&1)" || { echo "vgpuctl sriov $pf --vfs 2: $output"; return 1; }
  vf="$(basename "$(readlink "/sys/bus/pci/devices/$pf/virtfn0")")"
  output="$(timeout 60 busctl --system call org.mdevmanager.VGpu1 /org/mdevmanager/VGpu1/Manager \
    org.mdevmanager.VGpu1.Manager PrepareDomain 'ssaa{sv}a{sv}' vmtier "$domain" \
    1 2 kind s vf pci_address s "$vf" 0 2>&1)" || { echo "PrepareDomain: $output"; return 1; }
  driver="$(basename "$(readlink "/sys/bus/pci/devices/$vf/driver" 2>/dev/null)")"
  [ "$driver" = vfio-pci ] || { echo "after PrepareDomain $vf is bound to '$driver', not vfio-pci"; return 1; }
  output="$("$bin/vfio-probe" --kvm never "$vf" 2>&1)" || { echo "vfio-probe $vf after PrepareDomain: $output"; return 1; }
  output="$(timeout 60 busctl --system call org.mdevmanager.VGpu1 /org/mdevmanager/VGpu1/Manager \
    org.mdevmanager.VGpu1.Manager ReleaseDomain 'ssa{sv}' vmtier "$domain" 0 2>&1)" ||
    { echo "ReleaseDomain: $output"; return 1; }
  driver="$(basename "$(readlink "/sys/bus/pci/devices/$vf/driver" 2>/dev/null)")"
  [ -z "$driver" ] || { echo "after ReleaseDomain $vf is still bound to $driver"; return 1; }
  output="$(vgpuctl sriov "$pf" --vfs 0 2>&1)" || { echo "vgpuctl sriov $pf --vfs 0: $output"; return 1; }
  echo "PrepareDomain bound $vf to vfio-pci (probe ok), ReleaseDomain unbound it"
}

product_hotplug() {
  rmmod mdpy || { echo "rmmod mdpy failed"; return 1; }
  wait_until 20 eval '[[ " $(parent_names) " != *" mdpy "* ]]' ||
    { echo "mdpy still listed 20 s after rmmod: $(parent_names)"; return 1; }
  modprobe mdpy count=4 || return 1
  wait_until 20 eval '[[ " $(parent_names) " == *" mdpy "* ]]' ||
    { echo "mdpy not listed 20 s after modprobe: $(parent_names)"; return 1; }
  echo "rmmod/modprobe mdpy seen by the running service"
}

product_destroy_all() {
  local uuids output foreign
  foreign="$(recall foreign_uuid)"
  foreign="${foreign:-none}"
  uuids="$(vgpuctl --json list | python3 -c 'import json,sys; print(" ".join(i["uuid"] for i in json.load(sys.stdin) if i.get("owner") != "foreign"))')" || return 1
  uuids="$(tr ' ' '\n' <<<"$uuids" | grep -v "^$foreign\$" | tr '\n' ' ')"
  # shellcheck disable=SC2086
  output="$(vgpuctl destroy $uuids 2>&1)" || { echo "destroy $uuids: $output"; return 1; }
  local left
  left="$(ls /sys/bus/mdev/devices | grep -v "^$foreign\$" | tr '\n' ' ')"
  [ -z "$left" ] || { echo "left behind: $left"; return 1; }
  [ -d "/sys/bus/mdev/devices/$foreign" ] || { echo "the foreign mdev went too"; return 1; }
  echo "destroyed $uuids; only the foreign mdev remains"
}

# libvirt end to end: libvirtd in the guest with the hook installed before it starts; a domain
# whose metadata asks for an mtty vGPU starts (the hook creates the mdev, the nested QEMU holds
# /dev/vfio/N) and its destroy releases it; a domain asking for more than the capacity fails to
# start with the hook's message and leaves nothing behind.
group_libvirt() {
  if [ ! -x "$bin/mdev-manager-hook" ] || [ ! -x "$bin/mdev-manager" ] || [ ! -x "$bin/vgpuctl" ]; then
    skip libvirt "mdev-manager-hook, mdev-manager or vgpuctl is not built"
    return
  fi
  if ! command -v libvirtd >/dev/null; then
    skip libvirt "libvirtd is not installed (libvirt-daemon)"
    return
  fi
  remove_all_mdevs
  modprobe mtty && modprobe mbochs count=64
  check libvirt.service libvirt_ensure_service || return
  check libvirt.hook_installed libvirt_install_hook || return
  check libvirt.libvirtd_start libvirt_start || return
  check libvirt.domain_gets_its_vgpu libvirt_domain_start
  check libvirt.attach_live libvirt_attach_live
  check libvirt.detach_live libvirt_detach_live
  check libvirt.destroy_releases_it libvirt_domain_destroy
  check libvirt.over_capacity_refused libvirt_over_capacity
  check libvirt.attach_config libvirt_attach_config
  check libvirt.config_attached_domain_restarts libvirt_config_restarts
  check libvirt.detach_config libvirt_detach_config
  libvirt_stop
  product_stop
}

# The bus and the daemon, started unless the product group left them running.
libvirt_ensure_service() {
  if [ ! -S /run/dbus/system_bus_socket ]; then
    product_start_bus >/dev/null || { echo "cannot start the system bus"; return 1; }
  fi
  if ! running "$(recall daemon_pid)"; then
    start_daemon || return 1
  fi
  echo "bus and mdev-manager running"
}

libvirt_install_hook() {
  "$bin/mdev-manager-hook" --install >/dev/null 2>&1 || { echo "mdev-manager-hook --install failed"; return 1; }
  [ -x /etc/libvirt/hooks/qemu.d/mdev-manager ] || { echo "no /etc/libvirt/hooks/qemu.d/mdev-manager"; return 1; }
  echo "/etc/libvirt/hooks/qemu.d/mdev-manager installed before libvirtd starts"
}

libvirt_start() {
  # What the packages' postinst and systemd would provide, on the guest's private overlay.
  getent group kvm >/dev/null || groupadd -r kvm
  getent group libvirt >/dev/null || groupadd -r libvirt
  getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
  getent passwd libvirt-qemu >/dev/null || useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
  mkdir -p /run/libvirt /var/lib/libvirt/qemu /var/log/libvirt/qemu /var/cache/libvirt/qemu
  cat >/etc/libvirt/qemu.conf <<'CONF'
user = "root"
group = "root"
dynamic_ownership = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
stdio_handler = "file"
CONF
  LIBVIRT_LOG_OUTPUTS="3:file:$out/libvirtd.log" libvirtd -d || { echo "libvirtd -d failed"; return 1; }
  wait_until 120 eval 'timeout 30 virsh -c qemu:///system version >/dev/null 2>&1' ||
    { echo "libvirtd did not answer within 120 s"; return 1; }
  echo "libvirtd answers virsh"
}

libvirt_stop() {
  local pid
  pid="$(cat /run/libvirtd.pid 2>/dev/null)"
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait_until 20 eval '! running '"$pid"
}

# domain_xml NAME UUID METADATA HOSTDEVS
domain_xml() {
  cat <<XML
<domain type='qemu'>
  <name>$1</name>
  <uuid>$2</uuid>
  <metadata>
    <vgpu:vgpus xmlns:vgpu="https://mdev-manager.org/xmlns/vgpu/1">$3</vgpu:vgpus>
  </metadata>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>$4
  </devices>
</domain>
XML
}

mdev_hostdev() {
  echo "
    <hostdev mode='subsystem' type='mdev' model='vfio-pci'><source><address uuid='$1'/></source></hostdev>"
}

libvirt_domain_start() {
  local uuid output group got
  uuid="$(new_uuid)"
  remember libvirt_mdev "$uuid"
  # Spare root ports: q35 hot-plugs a PCIe device only into an empty root port (attach_live),
  # and libvirt puts the hostdev, the USB controller and the balloon on free ones first.
  # (libvirt numbers a controller without an index from 0, which only pcie-root may take.)
  domain_xml vmtier-mtty "$(new_uuid)" "<vgpu:vgpu profile='mtty' uuid='$uuid'/>" "$(mdev_hostdev "$uuid")
    <controller type='pci' index='0' model='pcie-root'/>$(printf "\n    <controller type='pci' model='pcie-root-port'/>%.0s" 1 2 3 4 5)" >/tmp/vmtier-mtty.xml
  output="$(timeout 180 virsh -c qemu:///system create /tmp/vmtier-mtty.xml 2>&1)" ||
    { echo "virsh create: $output"; return 1; }
  [ -d "/sys/bus/mdev/devices/$uuid" ] || { echo "the domain runs but mdev $uuid does not exist"; return 1; }
  group="$(mdev_group "$uuid")"
  got="$(sysfs_open_errno "/dev/vfio/$group")"
  [ "$got" = EBUSY ] || { echo "open of /dev/vfio/$group while the domain runs: $got, expected EBUSY"; return 1; }
  echo "virsh create made mdev $uuid through the hook; the nested QEMU holds /dev/vfio/$group"
}

# vgpuctl attach/detach against the real libvirtd (issue 17): vgpuctl runs libvirt's own
# `virsh` (PATH), as an administrator would.
libvirt_vgpuctl() { LIBVIRT_DEFAULT_URI=qemu:///system timeout 180 "$bin/vgpuctl" --no-ask "$@"; }

# instance_field UUID FIELD: one field of `vgpuctl --json show UUID` (booleans as true/false).
instance_field() {
  vgpuctl --json show "$1" | python3 -c 'import json, sys
value = json.load(sys.stdin)[sys.argv[1]]
print(str(value).lower() if isinstance(value, bool) else value)' "$2"
}

# domain_names_mdev DOMAIN UUID [--inactive]: the domain's XML (live, or its configuration)
# has the mdev hostdev's <address uuid='UUID'/>.
domain_names_mdev() {
  # shellcheck disable=SC2086
  timeout 60 virsh -c qemu:///system dumpxml ${3:-} "$1" | grep -q "<address uuid='$2'/>"
}

# expect_claim UUID HOLDER PERSISTENT: vgpuctl show agrees.
expect_claim() {
  local holder persistent
  holder="$(instance_field "$1" holder)" || { echo "vgpuctl show $1 failed"; return 1; }
  persistent="$(instance_field "$1" persistent)" || return 1
  [ "$holder" = "$2" ] || { echo "$1 is held by '$holder', expected '$2'"; return 1; }
  [ "$persistent" = "$3" ] || { echo "$1 persistent is $persistent, expected $3"; return 1; }
}

libvirt_attach_live() {
  local uuid group got
  uuid="$(libvirt_vgpuctl attach vmtier-mtty mtty --live 2>/tmp/vmtier-attach.err)" ||
    { echo "vgpuctl attach vmtier-mtty mtty --live: $uuid $(cat /tmp/vmtier-attach.err)"; return 1; }
  remember libvirt_live_mdev "$uuid"
  [ -d "/sys/bus/mdev/devices/$uuid" ] || { echo "attached $uuid, but there is no such mdev"; return 1; }
  domain_names_mdev vmtier-mtty "$uuid" || { echo "virsh dumpxml vmtier-mtty does not name $uuid"; return 1; }
  expect_claim "$uuid" vmtier-mtty false || return 1
  group="$(mdev_group "$uuid")"
  got="$(sysfs_open_errno "/dev/vfio/$group")"
  [ "$got" = EBUSY ] || { echo "open of /dev/vfio/$group after the hot-plug: $got, expected EBUSY (QEMU holds it)"; return 1; }
  echo "vgpuctl attach --live: mdev $uuid in the running vmtier-mtty (dumpxml names it, its QEMU holds /dev/vfio/$group); vgpuctl: claimed by vmtier-mtty, transient"
}

# The nested domain runs no guest OS (SeaBIOS only), so nothing answers QEMU's PCIe hot-unplug
# request: libvirt sends it and `virsh detach-device --live` returns, but the device stays in
# the running domain (as with a guest that refuses or is slow to eject). vgpuctl must then keep
# the instance, still claimed, rather than destroy a device QEMU holds: the claim and the
# domain's XML agree. The domain's stop (libvirt_domain_destroy) releases it.
libvirt_detach_live() {
  local uuid output
  uuid="$(recall libvirt_live_mdev)"
  output="$(libvirt_vgpuctl detach vmtier-mtty "$uuid" --live 2>&1)" ||
    { echo "vgpuctl detach vmtier-mtty $uuid --live: $output"; return 1; }
  grep -q "instance $uuid kept: domain vmtier-mtty still names it in the running domain" <<<"$output" ||
    { echo "vgpuctl detach did not say it kept $uuid: $output"; return 1; }
  domain_names_mdev vmtier-mtty "$uuid" || { echo "virsh dumpxml vmtier-mtty no longer names $uuid, yet vgpuctl kept it: $output"; return 1; }
  [ -d "/sys/bus/mdev/devices/$uuid" ] || { echo "mdev $uuid is gone"; return 1; }
  expect_claim "$uuid" vmtier-mtty false || return 1
  expect_claim "$(recall libvirt_mdev)" vmtier-mtty false || return 1
  echo "vgpuctl detach --live with no guest to eject the device: dumpxml still names $uuid, so the instance stays, claimed by vmtier-mtty ($(head -n1 <<<"$output"))"
}

libvirt_attach_config() {
  local uuid output state
  domain_xml vmtier-cfg "$(new_uuid)" "" "" >/tmp/vmtier-cfg.xml
  output="$(timeout 120 virsh -c qemu:///system define /tmp/vmtier-cfg.xml 2>&1)" || { echo "virsh define: $output"; return 1; }
  uuid="$(libvirt_vgpuctl attach vmtier-cfg mtty --config 2>/tmp/vmtier-attach.err)" ||
    { echo "vgpuctl attach vmtier-cfg mtty --config: $uuid $(cat /tmp/vmtier-attach.err)"; return 1; }
  remember libvirt_config_mdev "$uuid"
  state="$(timeout 60 virsh -c qemu:///system domstate vmtier-cfg)"
  [ "$state" = "shut off" ] || { echo "vmtier-cfg is '$state' after the attach, expected shut off"; return 1; }
  domain_names_mdev vmtier-cfg "$uuid" --inactive || { echo "virsh dumpxml --inactive vmtier-cfg does not name $uuid"; return 1; }
  expect_claim "$uuid" vmtier-cfg true || return 1
  echo "vgpuctl attach --config: vmtier-cfg (shut off) names mdev $uuid in its configuration; vgpuctl: claimed by vmtier-cfg, persistent"
}

# The domain the configuration names the vGPU in starts, stops and starts again: the stop
# (the hook's release) drops the claim and keeps the persistent instance, so the next start
# finds its device (a transient instance would have been destroyed at the first stop, leaving
# the configuration naming an mdev that no longer exists).
libvirt_config_restarts() {
  local uuid output round group got
  uuid="$(recall libvirt_config_mdev)"
  for round in 1 2; do
    output="$(timeout 180 virsh -c qemu:///system start vmtier-cfg 2>&1)" || { echo "virsh start vmtier-cfg (start $round): $output"; return 1; }
    expect_claim "$uuid" vmtier-cfg true || return 1
    group="$(mdev_group "$uuid")"
    got="$(sysfs_open_errno "/dev/vfio/$group")"
    [ "$got" = EBUSY ] || { echo "start $round: open of /dev/vfio/$group: $got, expected EBUSY (QEMU holds it)"; return 1; }
    output="$(timeout 120 virsh -c qemu:///system destroy vmtier-cfg 2>&1)" || { echo "virsh destroy vmtier-cfg (stop $round): $output"; return 1; }
    wait_until 30 eval '[ -z "$(instance_field '"$uuid"' holder)" ]' || { echo "stop $round: $uuid still held: $(instance_field "$uuid" holder)"; return 1; }
    expect_claim "$uuid" "" true || return 1
    [ -d "/sys/bus/mdev/devices/$uuid" ] || { echo "stop $round: mdev $uuid went with the domain"; return 1; }
    domain_names_mdev vmtier-cfg "$uuid" --inactive || { echo "stop $round: the configuration no longer names $uuid"; return 1; }
  done
  echo "vmtier-cfg started twice with mdev $uuid (its QEMU held /dev/vfio/$group, vgpuctl: held by vmtier-cfg); each stop dropped the claim and kept the instance"
}

libvirt_detach_config() {
  local uuid output
  uuid="$(recall libvirt_config_mdev)"
  output="$(libvirt_vgpuctl detach vmtier-cfg "$uuid" --config 2>&1)" ||
    { echo "vgpuctl detach vmtier-cfg $uuid --config: $output"; return 1; }
  ! domain_names_mdev vmtier-cfg "$uuid" --inactive || { echo "virsh dumpxml --inactive vmtier-cfg still names $uuid: $output"; return 1; }
  wait_until 30 eval '[ ! -e /sys/bus/mdev/devices/'"$uuid"' ]' || { echo "mdev $uuid still present 30 s after the detach: $output"; return 1; }
  ! vgpuctl show "$uuid" >/dev/null 2>&1 || { echo "vgpuctl still lists $uuid: $output"; return 1; }
  output="$(timeout 60 virsh -c qemu:///system undefine vmtier-cfg 2>&1)" || { echo "virsh undefine vmtier-cfg: $output"; return 1; }
  echo "vgpuctl detach --config: gone from vmtier-cfg's configuration, mdev $uuid and its instance destroyed"
}

libvirt_domain_destroy() {
  local uuid output live
  uuid="$(recall libvirt_mdev)"
  live="$(recall libvirt_live_mdev)"
  output="$(timeout 120 virsh -c qemu:///system destroy vmtier-mtty 2>&1)" || { echo "virsh destroy: $output"; return 1; }
  wait_until 30 eval '[ ! -e /sys/bus/mdev/devices/'"$uuid"' ]' || { echo "mdev $uuid still present 30 s after destroy"; return 1; }
  if [ -n "$live" ]; then
    # The hot-plugged one (still in the domain, see libvirt_detach_live) goes with the domain.
    wait_until 30 eval '[ ! -e /sys/bus/mdev/devices/'"$live"' ]' || { echo "hot-plugged mdev $live still present 30 s after destroy"; return 1; }
    ! vgpuctl show "$live" >/dev/null 2>&1 || { echo "vgpuctl still lists the hot-plugged $live"; return 1; }
  fi
  echo "virsh destroy released mdev $uuid${live:+ and the hot-plugged $live}"
}

libvirt_over_capacity() {
  local output status=0 before after
  before="$(count_mdevs)"
  # Two mbochs-large (64 MB each) never fit in mbochs count=64.
  domain_xml vmtier-big "$(new_uuid)" "<vgpu:vgpu profile='mbochs-large'/><vgpu:vgpu profile='mbochs-large'/>" \
    "$(mdev_hostdev "$(new_uuid)")$(mdev_hostdev "$(new_uuid)")" >/tmp/vmtier-big.xml
  output="$(timeout 180 virsh -c qemu:///system create /tmp/vmtier-big.xml 2>&1)" || status=$?
  [ "$status" != 0 ] || { echo "the over-capacity domain started"; timeout 60 virsh -c qemu:///system destroy vmtier-big; return 1; }
  after="$(count_mdevs)"
  [ "$before" = "$after" ] || { echo "mdev count went from $before to $after"; return 1; }
  grep -q "mdev-manager-hook: cannot claim vGPUs for domain 'vmtier-big'.*no capacity" <<<"$(tr '\n' ' ' <<<"$output")" ||
    { echo "the error does not carry the hook's message: $output"; return 1; }
  echo "refused with the hook's message: $(grep -o 'mdev-manager-hook: .*' <<<"$(tr '\n' ' ' <<<"$output")" | cut -c1-160)"
}

# Whole-GPU pass-through (issue #10) on the real kernel. The stand-in GPU is QEMU's
# bochs-display (1234:1111, class 0380, driver bochs-drm) with an ich9-intel-hda (8086:293e,
# class 0403, driver snd_hda_intel) as function 1 of the same slot: one IOMMU group with two
# functions, like a GPU and its HDMI audio. Through the service: bind (vgpuctl create of a
# passthrough profile), /dev/vfio/N and vfio-probe on both functions, release refused while a
# VMM holds the group, release gives the drivers back; a domain's claim (PrepareDomain) refused
# to a second domain; a group with a host-used member refused; `force` on a second display whose
# group holds an AHCI controller (refused without it, taken whole with it, given back whole);
# kill -9 of the daemon mid-bind, then reconcile on restart leaves the group whole (all bound or
# all returned).
group_passthrough() {
  if [ ! -x "$bin/mdev-manager" ] || [ ! -x "$bin/vgpuctl" ]; then
    skip passthrough "mdev-manager or vgpuctl is not built"
    return
  fi
  check passthrough.stand_in_gpu pt_setup || return
  check passthrough.service pt_start_service || return
  check passthrough.bind pt_bind
  check passthrough.vfio_probe pt_probe
  check passthrough.release_refused_while_held pt_release_held
  check passthrough.release_gives_drivers_back pt_release
  check passthrough.second_domain_refused pt_second_domain
  check passthrough.host_used_member_refused pt_host_used
  check passthrough.force_refused_without_force pt_force_refused
  check passthrough.force_takes_the_group pt_force_bind
  check passthrough.force_release_gives_drivers_back pt_force_release
  check passthrough.crash_mid_bind_then_reconcile pt_crash_mid_bind
  pt_cleanup
  product_stop
}

PT_PROFILE=vmtier-gpu
PT_FORCE_PROFILE=vmtier-gpu-ahci
PT_DOMAIN_A=aaaaaaaa-1111-4222-8333-444444444444
PT_DOMAIN_B=bbbbbbbb-1111-4222-8333-444444444444

pci_driver_of() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }
pci_group_of() { basename "$(readlink "/sys/bus/pci/devices/$1/iommu_group")"; }

# The group's functions and their drivers, one "address=driver" word each (no driver: "-").
pt_group_drivers() {
  local dev out=""
  for dev in "/sys/kernel/iommu_groups/$(recall pt_group)/devices/"*; do
    out+="$(basename "$dev")=$(pci_driver_of "$(basename "$dev")" || true) "
  done
  sed 's/= /=- /g; s/ $//' <<<"$out"
}

# Both functions on their host drivers, no override left, the host side working: the display
# has its DRM card and the HDA function its sound card.
pt_host_drivers_back() {
  local gpu audio
  gpu="$(recall pt_gpu)" audio="$(recall pt_audio)"
  wait_until 20 eval '[ "$(pci_driver_of '"$gpu"')" = bochs-drm ] && [ "$(pci_driver_of '"$audio"')" = snd_hda_intel ]' ||
    { echo "drivers are not back: $(pt_group_drivers)"; return 1; }
  expect_equal "driver_override of $gpu" "(null)" "$(cat "/sys/bus/pci/devices/$gpu/driver_override")" >/dev/null || return 1
  expect_equal "driver_override of $audio" "(null)" "$(cat "/sys/bus/pci/devices/$audio/driver_override")" >/dev/null || return 1
  [ ! -e "/dev/vfio/$(recall pt_group)" ] || { echo "/dev/vfio/$(recall pt_group) still present"; return 1; }
  wait_until 20 eval 'ls -d /sys/bus/pci/devices/'"$gpu"'/drm/card* >/dev/null 2>&1' ||
    { echo "bochs-drm is bound to $gpu but it has no DRM card"; return 1; }
  wait_until 20 eval 'ls -d /sys/bus/pci/devices/'"$audio"'/sound/card* >/dev/null 2>&1' ||
    { echo "snd_hda_intel is bound to $audio but it has no sound card"; return 1; }
  echo "$gpu on bochs-drm ($(basename "$(ls -d "/sys/bus/pci/devices/$gpu/drm/card"* | head -n1)")), $audio on snd_hda_intel ($(basename "$(ls -d "/sys/bus/pci/devices/$audio/sound/card"* | head -n1)")), no overrides"
}

pt_all_on_vfio() {
  local gpu audio group
  gpu="$(recall pt_gpu)" audio="$(recall pt_audio)" group="$(recall pt_group)"
  [ "$(pci_driver_of "$gpu")" = vfio-pci ] && [ "$(pci_driver_of "$audio")" = vfio-pci ] ||
    { echo "not every function is on vfio-pci: $(pt_group_drivers)"; return 1; }
  [ -c "/dev/vfio/$group" ] || { echo "no /dev/vfio/$group"; return 1; }
}

pt_setup() {
  local dev gpu="" audio
  modprobe vfio-pci && modprobe bochs && modprobe snd-hda-intel || { echo "cannot load vfio-pci, bochs, snd-hda-intel"; return 1; }
  modprobe kvm_amd
  # Two bochs-displays (1234:1111): the stand-in GPU has the HDA function (class 0403) as
  # function 1, the force checks' one an AHCI controller (class 0106).
  for dev in /sys/bus/pci/devices/*; do
    if [ "$(cat "$dev/vendor")" = 0x1234 ] && [ "$(cat "$dev/device")" = 0x1111 ]; then
      case "$(cat "${dev%.0}.1/class" 2>/dev/null)" in
        0x040300) gpu="$(basename "$dev")" ;;
        0x010601) remember pt_force_gpu "$(basename "$dev")" ;;
      esac
    fi
  done
  [ -n "$gpu" ] || { echo "no bochs-display (1234:1111) PCI function with an HDA function 1"; return 1; }
  audio="${gpu%.0}.1"
  local group
  group="$(pci_group_of "$gpu")"
  expect_equal "IOMMU group of $audio" "$group" "$(pci_group_of "$audio")" >/dev/null || return 1
  remember pt_gpu "$gpu"
  remember pt_audio "$audio"
  remember pt_group "$group"
  pt_host_drivers_back >/dev/null || return 1
  local d ids=""
  for d in "$gpu" "$audio"; do
    d="/sys/bus/pci/devices/$d"
    ids+=" $(cat "$d/vendor" "$d/device" "$d/subsystem_vendor" "$d/subsystem_device" "$d/class" | tr '\n' ':' | sed 's/:$//')"
  done
  echo "group $group: $(pt_group_drivers) (vendor:device:subsystem:class$ids)"
}

# The service with a passthrough profile matching the stand-in (restarted to read it).
pt_start_service() {
  mkdir -p /etc/mdev-manager/profiles.d
  cat >/etc/mdev-manager/profiles.d/vmtier-passthrough.toml <<TOML
[[profile]]
name = "$PT_PROFILE"
description = "the VM tier's stand-in GPU, whole"
isolation = "passthrough"
[profile.device]
vendor_id = "1234"
device_id = "1111"
TOML
  if [ -n "$(recall pt_force_gpu)" ]; then
    cat >>/etc/mdev-manager/profiles.d/vmtier-passthrough.toml <<TOML

[[profile]]
name = "$PT_FORCE_PROFILE"
description = "the VM tier's display whose IOMMU group holds an AHCI controller"
isolation = "passthrough"
[profile.device]
vendor_id = "1234"
device_id = "1111"
pci_address = "$(recall pt_force_gpu)"
TOML
  fi
  if [ ! -S /run/dbus/system_bus_socket ]; then
    product_start_bus >/dev/null || { echo "cannot start the system bus"; return 1; }
  fi
  local pid
  pid="$(recall daemon_pid)"
  if running "$pid"; then
    kill "$pid" && wait_until 10 eval '! running '"$pid" || { echo "the running daemon did not stop"; return 1; }
  fi
  start_daemon || return 1
  vgpuctl --json profiles | grep -q "\"$PT_PROFILE\"" || { echo "profile $PT_PROFILE not listed: $(vgpuctl profiles)"; return 1; }
  echo "mdev-manager (pid $(recall daemon_pid)) with profile $PT_PROFILE"
}

pt_bind() {
  local uuid output kind
  uuid="$(vgpuctl create "$PT_PROFILE" 2>&1)" || { echo "vgpuctl create $PT_PROFILE: $uuid"; return 1; }
  remember pt_uuid "$uuid"
  pt_all_on_vfio || return 1
  output="$(vgpuctl --json show "$uuid")" || { echo "vgpuctl show $uuid: $output"; return 1; }
  kind="$(python3 -c 'import json,sys; i=json.load(sys.stdin); print(i["kind"], i.get("pci_address") or i.get("parent"))' <<<"$output")"
  expect_equal "kind and device of $uuid" "passthrough $(recall pt_gpu)" "$kind" >/dev/null || return 1
  output="$(vgpuctl xml "$uuid")" || return 1
  grep -q "<hostdev mode='subsystem' type='pci' managed='no'>" <<<"$output" || { echo "vgpuctl xml: $output"; return 1; }
  echo "vgpuctl create $PT_PROFILE: $uuid; $(pt_group_drivers); /dev/vfio/$(recall pt_group)"
}

pt_probe() {
  [ -n "$(recall pt_uuid)" ] || { echo "nothing bound"; return 1; }
  local gpu audio a b
  gpu="$(recall pt_gpu)" audio="$(recall pt_audio)"
  a="$(probe_all_ok "$gpu")" || { echo "$gpu: $a"; return 1; }
  b="$(probe_all_ok "$audio")" || { echo "$audio: $b"; return 1; }
  echo "$gpu: $a; $audio: $b"
}

pt_release_held() {
  local uuid output status=0
  uuid="$(recall pt_uuid)"
  [ -n "$uuid" ] || { echo "nothing bound"; return 1; }
  start_holder "/sys/bus/pci/devices/$(recall pt_gpu)" || return 1
  output="$(vgpuctl destroy "$uuid" 2>&1)" || status=$?
  release_holder
  [ "$status" = 6 ] || { echo "destroy while held: expected exit 6 (in use), got $status: $output"; return 1; }
  pt_all_on_vfio || return 1
  echo "exit 6: $output"
}

pt_release() {
  local uuid output
  uuid="$(recall pt_uuid)"
  [ -n "$uuid" ] || { echo "nothing bound"; return 1; }
  output="$(vgpuctl destroy "$uuid" 2>&1)" || { echo "vgpuctl destroy $uuid: $output"; return 1; }
  remember pt_uuid ""
  pt_host_drivers_back || return 1
}

manager_call() {
  timeout 60 busctl --system call org.mdevmanager.VGpu1 /org/mdevmanager/VGpu1/Manager \
    org.mdevmanager.VGpu1.Manager "$@" 2>&1
}

# pt_prepare DOMAIN_NAME DOMAIN_UUID PCI_ADDRESS: what the libvirt hook sends at prepare for
# <vgpu:vgpu kind='passthrough' pci_address='...'/>. Through gdbus, whose error lines carry the
# D-Bus error name (busctl prints only the message).
pt_prepare() {
  timeout 60 gdbus call --system --dest org.mdevmanager.VGpu1 --object-path /org/mdevmanager/VGpu1/Manager \
    --method org.mdevmanager.VGpu1.Manager.PrepareDomain "'$1'" "'$2'" \
    "[{'kind': <'passthrough'>, 'pci_address': <'$3'>}]" '@a{sv} {}' 2>&1
}

pt_second_domain() {
  local gpu output status=0
  gpu="$(recall pt_gpu)"
  output="$(pt_prepare vmtier-a "$PT_DOMAIN_A" "$gpu")" || { echo "PrepareDomain vmtier-a: $output"; return 1; }
  pt_all_on_vfio || return 1
  output="$(pt_prepare vmtier-b "$PT_DOMAIN_B" "$gpu")" || status=$?
  [ "$status" != 0 ] || { echo "the second domain got the GPU: $output"; return 1; }
  grep -q "Error.InUse: .*vmtier-a" <<<"$output" || { echo "the refusal is not InUse naming the holder vmtier-a: $output"; return 1; }
  pt_all_on_vfio || return 1
  local refusal="$output"
  output="$(manager_call ReleaseDomain 'ssa{sv}' vmtier-a "$PT_DOMAIN_A" 0)" || { echo "ReleaseDomain vmtier-a: $output"; return 1; }
  pt_host_drivers_back >/dev/null || return 1
  echo "vmtier-a bound the group; vmtier-b refused: $refusal; ReleaseDomain gave the drivers back"
}

# The chipset's multifunction slot 00:1f (LPC, AHCI, SMBus) is one IOMMU group on q35. With ahci
# driving the SATA function, a pass-through of the slot's function 0 must be refused naming the
# host's storage controller, and change nothing.
pt_host_used() {
  local lpc=0000:00:1f.0 sata=0000:00:1f.2 before after output status=0
  [ "$(cat "/sys/bus/pci/devices/$sata/class" 2>/dev/null)" = 0x010601 ] || { echo "no AHCI function $sata"; return 1; }
  [ "$(pci_group_of "$lpc")" = "$(pci_group_of "$sata")" ] || { echo "$lpc and $sata are not in one group"; return 1; }
  modprobe ahci || return 1
  [ "$(pci_driver_of "$sata")" = ahci ] || { echo "$sata is not driven by ahci"; return 1; }
  before="$(for d in /sys/kernel/iommu_groups/"$(pci_group_of "$lpc")"/devices/*; do echo "$(basename "$d")=$(pci_driver_of "$(basename "$d")"):$(cat "$d/driver_override")"; done)"
  output="$(pt_prepare vmtier-c "$PT_DOMAIN_B" "$lpc")" || status=$?
  after="$(for d in /sys/kernel/iommu_groups/"$(pci_group_of "$lpc")"/devices/*; do echo "$(basename "$d")=$(pci_driver_of "$(basename "$d")"):$(cat "$d/driver_override")"; done)"
  [ "$status" != 0 ] || { echo "pass-through of $lpc was accepted: $output"; manager_call ReleaseDomain 'ssa{sv}' vmtier-c "$PT_DOMAIN_B" 0; return 1; }
  grep -q "Error.InUse: " <<<"$output" && grep -q "$sata is in use by the host (a storage controller driven by ahci)" <<<"$output" ||
    { echo "unexpected refusal: $output"; return 1; }
  [ "$before" = "$after" ] || { echo "the group changed: before $(tr '\n' ' ' <<<"$before"), after $(tr '\n' ' ' <<<"$after")"; return 1; }
  pt_none_listed || return 1
  echo "refused: $(tr '\n' ' ' <<<"$output" | cut -c1-200); drivers unchanged"
}

# The force checks' group: a bochs-display (00.0) and an AHCI controller (00.1, no disks) in one
# slot behind the third root port, one IOMMU group. With ahci driving the AHCI function the
# group has a member the host uses: refused without force, taken whole with it, given back
# whole at release. (The chipset's own AHCI at 00:1f.2 cannot stand in: its group holds the LPC
# bridge that carries the serial console.)

# "address=driver:override" per member of the force checks' group, one a line.
pt_force_state() {
  local d
  for d in "/sys/kernel/iommu_groups/$(recall pt_force_group)/devices/"*; do
    echo "$(basename "$d")=$(pci_driver_of "$(basename "$d")"):$(cat "$d/driver_override")"
  done
}

pt_passthrough_uuids() {
  vgpuctl --json list | python3 -c 'import json,sys; print(" ".join(i["uuid"] for i in json.load(sys.stdin) if i.get("kind") == "passthrough"))'
}

# Succeeds only when vgpuctl could list the instances and none is a pass-through one: a listing
# that fails (the daemon gone) must not read as "none left".
pt_none_listed() {
  local uuids
  uuids="$(pt_passthrough_uuids)" || { echo "vgpuctl list failed: $uuids"; return 1; }
  [ -z "$uuids" ] || { echo "pass-through instances listed: $uuids"; return 1; }
}

pt_force_refused() {
  local gpu sata group before after output status=0
  gpu="$(recall pt_force_gpu)"
  [ -n "$gpu" ] || { echo "no bochs-display with an AHCI function 1 (tests/vm/run's third root port)"; return 1; }
  sata="${gpu%.0}.1"
  group="$(pci_group_of "$gpu")"
  expect_equal "IOMMU group of $sata" "$group" "$(pci_group_of "$sata")" >/dev/null || return 1
  [ "$(ls "/sys/kernel/iommu_groups/$group/devices" | tr '\n' ' ')" = "$gpu $sata " ] ||
    { echo "group $group is not exactly $gpu and $sata: $(ls "/sys/kernel/iommu_groups/$group/devices" | tr '\n' ' ')"; return 1; }
  remember pt_force_sata "$sata"
  remember pt_force_group "$group"
  modprobe ahci || return 1
  wait_until 20 eval '[ "$(pci_driver_of '"$gpu"')" = bochs-drm ] && [ "$(pci_driver_of '"$sata"')" = ahci ]' ||
    { echo "expected $gpu on bochs-drm and $sata on ahci: $(pt_force_state | tr '\n' ' ')"; return 1; }
  before="$(pt_force_state)"
  output="$(vgpuctl create "$PT_FORCE_PROFILE" 2>&1)" || status=$?
  after="$(pt_force_state)"
  if [ "$status" = 0 ]; then
    vgpuctl destroy --force "$output" >/dev/null 2>&1
    echo "vgpuctl create $PT_FORCE_PROFILE without --force succeeded: $output"
    return 1
  fi
  [ "$status" = 6 ] || { echo "expected exit 6 (in use), got $status: $output"; return 1; }
  grep -q "$sata is in use by the host (a storage controller driven by ahci); force takes it anyway" <<<"$output" ||
    { echo "the refusal does not name $sata, ahci and force: $output"; return 1; }
  [ "$before" = "$after" ] || { echo "the group changed: before $(tr '\n' ' ' <<<"$before"), after $(tr '\n' ' ' <<<"$after")"; return 1; }
  pt_none_listed || return 1
  [ ! -e "/dev/vfio/$group" ] || { echo "/dev/vfio/$group appeared"; return 1; }
  local d ids=""
  for d in "$gpu" "$sata"; do
    d="/sys/bus/pci/devices/$d"
    ids+=" $(cat "$d/vendor" "$d/device" "$d/subsystem_vendor" "$d/subsystem_device" "$d/class" | tr '\n' ':' | sed 's/:$//')"
  done
  echo "group $group, exit 6: $(tr '\n' ' ' <<<"$output" | cut -c1-220); unchanged: $(tr '\n' ' ' <<<"$after")(vendor:device:subsystem:class$ids)"
}

pt_force_bind() {
  local gpu sata group uuid output shown
  gpu="$(recall pt_force_gpu)" sata="$(recall pt_force_sata)" group="$(recall pt_force_group)"
  [ -n "$sata" ] || { echo "the refusal check did not find the group"; return 1; }
  uuid="$(vgpuctl create "$PT_FORCE_PROFILE" --force 2>&1)" || { echo "vgpuctl create $PT_FORCE_PROFILE --force: $uuid"; return 1; }
  remember pt_force_uuid "$uuid"
  [ "$(pci_driver_of "$gpu")" = vfio-pci ] && [ "$(pci_driver_of "$sata")" = vfio-pci ] ||
    { echo "not both on vfio-pci: $(pt_force_state | tr '\n' ' ')"; return 1; }
  [ -c "/dev/vfio/$group" ] || { echo "no /dev/vfio/$group"; return 1; }
  output="$(vgpuctl --json show "$uuid")" || { echo "vgpuctl show $uuid: $output"; return 1; }
  shown="$(python3 -c 'import json,sys; i=json.load(sys.stdin); print(i["kind"], i["pci_address"], i["iommu_group"], ",".join(i["group_members"]))' <<<"$output")" ||
    { echo "vgpuctl show $uuid: $output"; return 1; }
  expect_equal "kind, device, group and members of $uuid" "passthrough $gpu $group $gpu,$sata" "$shown" >/dev/null || return 1
  echo "vgpuctl create $PT_FORCE_PROFILE --force: $uuid; $(pt_force_state | tr '\n' ' ')/dev/vfio/$group"
}

pt_force_release() {
  local gpu sata group uuid output
  gpu="$(recall pt_force_gpu)" sata="$(recall pt_force_sata)" group="$(recall pt_force_group)" uuid="$(recall pt_force_uuid)"
  [ -n "$uuid" ] || { echo "nothing bound"; return 1; }
  output="$(vgpuctl destroy "$uuid" 2>&1)" || { echo "vgpuctl destroy $uuid: $output"; return 1; }
  remember pt_force_uuid ""
  wait_until 20 eval '[ "$(pci_driver_of '"$gpu"')" = bochs-drm ] && [ "$(pci_driver_of '"$sata"')" = ahci ]' ||
    { echo "drivers are not back: $(pt_force_state | tr '\n' ' ')"; return 1; }
  expect_equal "the group after release" "$gpu=bochs-drm:(null) $sata=ahci:(null)" "$(pt_force_state | tr '\n' ' ' | sed 's/ $//')" >/dev/null || return 1
  [ ! -e "/dev/vfio/$group" ] || { echo "/dev/vfio/$group still present"; return 1; }
  wait_until 20 eval 'ls -d /sys/bus/pci/devices/'"$sata"'/ata* >/dev/null 2>&1' ||
    { echo "ahci is bound to $sata but it has no ATA ports"; return 1; }
  pt_none_listed || return 1
  echo "$gpu on bochs-drm, $sata on ahci ($(ls -d "/sys/bus/pci/devices/$sata/ata"* | wc -l) ATA ports), no overrides, /dev/vfio/$group gone"
}

# kill -9 of the daemon in the middle of binding the group. The engine binds the card's
# functions first and the GPU last. The daemon is restarted under strace, which holds its open
# of bochs-drm's `unbind` - the GPU's unbind - for 120 s (seccomp-bpf: only openat stops, so the
# daemon runs at full speed otherwise). At the kill the HDA function is on vfio-pci, the display
# still on bochs-drm with its override set, and state.json says phase "binding": what a crash
# between two members leaves. Restarted, reconcile must return the whole group to its drivers
# and forget the transient instance.
pt_crash_mid_bind() {
  local gpu audio pid tracer creator at_kill phase after p
  gpu="$(recall pt_gpu)" audio="$(recall pt_audio)" pid="$(recall daemon_pid)"
  command -v strace >/dev/null || { echo "no strace on the host (package strace)"; return 1; }
  if running "$pid"; then
    kill "$pid" && wait_until 10 eval '! running '"$pid" || { echo "the running daemon did not stop"; return 1; }
  fi
  # Every output of a background job goes to a file: check captures this function's output and
  # would wait for the job to close it.
  NO_COLOR=1 strace -f --seccomp-bpf -qq -o /tmp/pt-strace.log -e trace=openat \
    -P /sys/bus/pci/drivers/bochs-drm/unbind -e inject=openat:delay_enter=120s \
    "$bin/mdev-manager" </dev/null >>"$out/daemon.log" 2>&1 &
  tracer=$!
  wait_until 30 eval 'vgpuctl status >/dev/null 2>&1' || { kill "$tracer"; echo "the daemon under strace did not answer within 30 s"; return 1; }
  pid=""
  for p in /proc/[0-9]*; do
    [ "$(awk '{ print $4 }' "$p/stat" 2>/dev/null)" = "$tracer" ] && pid="${p#/proc/}"
  done
  running "$pid" || { kill "$tracer"; echo "cannot find the daemon under strace $tracer"; return 1; }
  remember daemon_pid "$pid"
  vgpuctl create "$PT_PROFILE" </dev/null >/tmp/pt-create.log 2>&1 &
  creator=$!
  # The daemon is held at the GPU's unbind: HDA on vfio-pci, GPU override already vfio-pci.
  if ! wait_until 90 eval '[ "$(pci_driver_of '"$audio"')" = vfio-pci ] && [ "$(cat /sys/bus/pci/devices/'"$gpu"'/driver_override)" = vfio-pci ]'; then
    kill -9 "$pid"
    wait_until 10 eval '! running '"$tracer" || kill -9 "$tracer"
    echo "the bind never reached the GPU's unbind: $(pt_group_drivers); create: $(cat /tmp/pt-create.log)"
    return 1
  fi
  sleep 2
  at_kill="$(pt_group_drivers)"
  phase="$(python3 "$here/state_view.py" /var/lib/mdev-manager | python3 -c 'import json,sys; print(" ".join(b["phase"] for b in json.load(sys.stdin).get("passthrough", {}).values()))' 2>&1)"
  kill -9 "$pid"
  wait_until 10 eval '! running '"$pid" || { echo "the daemon survived kill -9"; return 1; }
  wait_until 10 eval '! running '"$tracer" || kill -9 "$tracer"
  # The interrupted create would wait for its call's timeout.
  kill "$creator" 2>/dev/null
  wait "$creator" 2>/dev/null
  [ "$at_kill" = "$gpu=bochs-drm $audio=vfio-pci" ] ||
    { echo "expected the GPU on bochs-drm and the HDA function on vfio-pci at the kill, saw: $at_kill"; return 1; }
  [ "$phase" = binding ] || { echo "state.json phase at the kill: '$phase', expected binding"; return 1; }
  start_daemon || return 1
  after="$(pt_group_drivers)"
  pt_host_drivers_back >/dev/null || { echo "after the restart the group is not back on its drivers: $after"; return 1; }
  pt_none_listed || return 1
  echo "killed mid-bind ($at_kill, phase $phase); after the restart: $after, instance forgotten"
}

pt_cleanup() {
  local uuid
  for uuid in $(vgpuctl --json list 2>/dev/null | python3 -c 'import json,sys; print(" ".join(i["uuid"] for i in json.load(sys.stdin) if i.get("kind") == "passthrough"))' 2>/dev/null); do
    vgpuctl destroy --force "$uuid" >/dev/null 2>&1
  done
  rmmod ahci 2>/dev/null
  return 0
}

# Unloading a parent driver takes its mdevs with it, and only its own.
group_unload() {
  check unload.rmmod_parent unload_parent
}

unload_parent() {
  local gone kept
  gone="$(create_mdev mdpy mdpy-vga)" || return 1
  kept="$(create_mdev mtty mtty-1)" || return 1
  rmmod mdpy || { echo "rmmod mdpy failed"; return 1; }
  [ ! -e "/sys/bus/mdev/devices/$gone" ] || { echo "mdpy mdev $gone survived rmmod"; return 1; }
  [ ! -e /sys/class/mdev_bus/mdpy ] || { echo "mdpy parent survived rmmod"; return 1; }
  [ -d "/sys/bus/mdev/devices/$kept" ] || { echo "mtty mdev $kept vanished with mdpy"; return 1; }
  echo 1 >"/sys/bus/mdev/devices/$kept/remove"
  modprobe mdpy count=4
  echo "rmmod mdpy removed its mdev $gone and kept mtty's $kept"
}

# ---- One service per host (issue 14, item 9) ----------------------------------------------
# A second mdev-manager started beside the running one: on the same state directory it stops
# on the lock, with another state directory it stops on the bus name before its start-up
# reconcile. Each time it exits non-zero naming the holder, sysfs and state.json are unchanged,
# and the first still owns the name and answers.
product_second_daemon() {
  local first state_before mdevs_before output status other pending
  first="$(recall daemon_pid)"
  state_before="$(cat /var/lib/mdev-manager/state.json /var/lib/mdev-manager/state.journal 2>/dev/null | sha256sum)"
  mdevs_before="$(ls /sys/bus/mdev/devices | tr '\n' ' ')"

  status=0
  output="$(NO_COLOR=1 timeout 60 "$bin/mdev-manager" 2>&1)" || status=$?
  [ "$status" != 0 ] && [ "$status" != 124 ] ||
    { echo "second daemon on the same state directory: exit $status (124: still running after 60 s): $output"; return 1; }
  [[ "$output" == *"/var/lib/mdev-manager/mdev-manager.lock"* && "$output" == *"pid $first"* ]] ||
    { echo "the refusal names neither the lock file nor pid $first: $output"; return 1; }
  local lock_message
  lock_message="$(grep -m1 'lock file' <<<"$output")"

  other="$(mktemp -d)"
  mkdir "$other/pending-releases"
  # Only a start-up reconcile would finish (and delete) this release.
  pending="$other/pending-releases/$(new_uuid)"
  echo vmtier >"$pending"
  status=0
  output="$(NO_COLOR=1 timeout 60 "$bin/mdev-manager" --state-dir "$other" 2>&1)" || status=$?
  [ "$status" != 0 ] && [ "$status" != 124 ] ||
    { echo "second daemon with another state directory: exit $status (124: still running after 60 s): $output"; return 1; }
  [[ "$output" == *"org.mdevmanager.VGpu1 is owned by"*"pid $first"* ]] ||
    { echo "the refusal does not name the bus name's owner (pid $first): $output"; return 1; }
  [ -f "$pending" ] || { echo "the second daemon ran its start-up reconcile before finding the name taken"; return 1; }
  rm -rf "$other"

  [ "$(cat /var/lib/mdev-manager/state.json /var/lib/mdev-manager/state.journal 2>/dev/null | sha256sum)" = "$state_before" ] || { echo "state.json or state.journal changed"; return 1; }
  [ "$(ls /sys/bus/mdev/devices | tr '\n' ' ')" = "$mdevs_before" ] ||
    { echo "mdevs changed from '$mdevs_before' to '$(ls /sys/bus/mdev/devices | tr '\n' ' ')'"; return 1; }
  running "$first" || { echo "the first daemon (pid $first) is gone"; return 1; }
  vgpuctl list >/dev/null || { echo "vgpuctl list fails after the second daemon exited"; return 1; }
  echo "refused: $lock_message; and on the bus name; the first (pid $first) still answers vgpuctl list"
}

# shellcheck source=nodedev.sh
source "$here/nodedev.sh"
# shellcheck source=torture.sh
source "$here/torture.sh"
