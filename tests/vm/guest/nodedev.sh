# libvirt's node-device API driving mdev-manager through the mdevctl-compatible command (issue 17,
# item 5), sourced by checks.sh. libvirtd runs with a directory holding `mdevctl` ->
# mdev-manager-mdevctl first on its PATH (Debian 12's libvirt 9.0 runs the bare name `mdevctl`,
# found on PATH: its nodedev driver carries no fixed path; the first check shows that), and the
# service runs. An mtty instance made with `vgpuctl create --autostart` appears in
# `virsh nodedev-list --cap mdev --all`; `nodedev-autostart [--disable]` goes through our
# command and `vgpuctl list` agrees. `nodedev-destroy` stops it although libvirtd keeps the
# group node open meanwhile (only a device fd holds a device: mdev-manager/src/holders.rs),
# `nodedev-start` brings it back, a domain started by libvirtd uses it, and while that domain
# runs `nodedev-destroy` is refused and changes nothing; `nodedev-undefine` of the stopped
# device forgets the instance. `nodedev-define`/`nodedev-create` need a
# parent libvirt can give an address (a PCI, CCW or AP device): the kernel's sample parents
# (mtty, mbochs, mdpy) are virtual devices, so libvirt refuses before it runs mdevctl; the last
# check shows that refusal leaves nothing behind.

NODEDEV_SHIM_DIR=/run/vmtier-mdevctl-path

group_nodedev() {
  if [ ! -x "$bin/mdev-manager-mdevctl" ] || [ ! -x "$bin/mdev-manager" ] || [ ! -x "$bin/vgpuctl" ]; then
    skip nodedev "mdev-manager-mdevctl, mdev-manager or vgpuctl is not built"
    return
  fi
  if ! command -v libvirtd >/dev/null; then
    skip nodedev "libvirtd is not installed (libvirt-daemon)"
    return
  fi
  remove_all_mdevs
  modprobe mtty
  check nodedev.libvirt_runs_mdevctl_from_path nodedev_driver_uses_path || return
  check nodedev.service nodedev_service || return
  check nodedev.libvirtd_start_with_our_mdevctl nodedev_libvirtd_start || return
  check nodedev.vgpuctl_autostart_instance_listed nodedev_reverse_listed || { nodedev_cleanup; return; }
  check nodedev.destroy_stops_it_while_libvirtd_checks_the_group nodedev_destroy_stops &&
    check nodedev.start_brings_it_back nodedev_start &&
    check nodedev.domain_uses_the_started_device nodedev_domain_start &&
    check nodedev.destroy_refused_while_a_domain_uses_it nodedev_destroy_refused_while_used
  nodedev_domain_stop
  check nodedev.autostart_disable_and_enable nodedev_autostart
  check nodedev.undefine_forgets_the_stopped_instance nodedev_undefine
  check nodedev.define_on_virtual_parent_refused_by_libvirt nodedev_define_virtual_parent
  nodedev_cleanup
}

# The instance is persistent and autostart: destroyed here so that a later group's daemon does
# not recreate it.
nodedev_cleanup() {
  local uuid
  uuid="$(recall nodedev_uuid)"
  [ -z "$uuid" ] || vgpuctl destroy "$uuid" >/dev/null 2>&1
  libvirt_stop
  product_stop
}

virsh_sys() { timeout 120 virsh -c qemu:///system "$@"; }

# nodedev_state UUID: "active persistent autostart" as vgpuctl reports them (yes/no each), or
# "absent".
nodedev_state() {
  vgpuctl --json list | python3 -c '
import json, sys
yn = lambda b: "yes" if b else "no"
for i in json.load(sys.stdin):
    if i["uuid"] == sys.argv[1]:
        print(yn(i["active"]), yn(i["persistent"]), yn(i["autostart"]))
        break
else:
    print("absent")' "$1"
}

# nodedev_name UUID [--all]: libvirt's node-device name of the mdev (libvirt 9.0 names it
# mdev_<uuid with underscores>, newer releases append the parent), empty when it lists none.
nodedev_name() {
  virsh_sys nodedev-list --cap mdev ${2:-} 2>/dev/null | grep -m1 "mdev_${1//-/_}" | tr -d ' '
}

nodedev_listed() { [ -n "$(nodedev_name "$@")" ]; }

nodedev_driver_uses_path() {
  local so
  so="$(ls /usr/lib/*/libvirt/connection-driver/libvirt_driver_nodedev.so 2>/dev/null | head -n1)"
  [ -n "$so" ] || { echo "no /usr/lib/*/libvirt/connection-driver/libvirt_driver_nodedev.so"; return 1; }
  # The program name is the bare string "mdevctl"; a fixed path would show as /…/mdevctl.
  strings "$so" | grep -qx mdevctl || { echo "$so has no bare 'mdevctl' string"; return 1; }
  if strings "$so" | grep -q '/mdevctl$'; then
    echo "$so names a fixed path: $(strings "$so" | grep '/mdevctl$' | tr '\n' ' ')"
    return 1
  fi
  echo "$so runs the bare name mdevctl (PATH lookup), no fixed path"
}

nodedev_service() {
  [ -S /run/udev/control ] || product_start_udevd >/dev/null || { echo "cannot start systemd-udevd"; return 1; }
  libvirt_ensure_service >/dev/null || { echo "bus or mdev-manager did not start"; return 1; }
  # libvirt watches /etc/mdevctl.d only when it exists at start; the service's mirror writes there.
  mkdir -p /etc/mdevctl.d
  mkdir -p "$NODEDEV_SHIM_DIR"
  ln -sf "$bin/mdev-manager-mdevctl" "$NODEDEV_SHIM_DIR/mdevctl"
  echo "udevd, bus and mdev-manager running; $NODEDEV_SHIM_DIR/mdevctl -> mdev-manager-mdevctl"
}

nodedev_libvirtd_start() {
  local pid found
  PATH="$NODEDEV_SHIM_DIR:$PATH"
  export PATH
  libvirt_start >/dev/null || { echo "libvirtd did not start"; return 1; }
  pid="$(cat /run/libvirtd.pid)"
  found="$(tr '\0' '\n' <"/proc/$pid/environ" | grep '^PATH=')"
  [[ "$found" == "PATH=$NODEDEV_SHIM_DIR:"* ]] || { echo "libvirtd's $found does not start with $NODEDEV_SHIM_DIR"; return 1; }
  echo "libvirtd (pid $pid) answers virsh; its $found"
}

nodedev_reverse_listed() {
  local uuid name
  uuid="$(vgpuctl create mtty --autostart)" || { echo "vgpuctl create mtty --autostart: $uuid"; return 1; }
  remember nodedev_uuid "$uuid"
  expect_equal "vgpuctl state of $uuid" "yes yes yes" "$(nodedev_state "$uuid")" >/dev/null || return 1
  wait_until 30 nodedev_listed "$uuid" --all ||
    { echo "$uuid not in virsh nodedev-list --cap mdev --all: $(virsh_sys nodedev-list --cap mdev --all 2>&1 | tr '\n' ' ')"; return 1; }
  name="$(nodedev_name "$uuid" --all)"
  remember nodedev_name "$name"
  wait_until 30 nodedev_listed "$uuid" || { echo "$name is listed but not as active"; return 1; }
  wait_until 30 eval 'virsh_sys nodedev-info '"$name"' | grep -Eq "^Autostart: +yes"' ||
    { echo "nodedev-info $name: $(virsh_sys nodedev-info "$name" 2>&1 | tr '\n' ' ')"; return 1; }
  echo "vgpuctl create mtty --autostart made $uuid; virsh lists it as $name, active, autostart yes"
}

# libvirt 9.0's nodedev-destroy opens /dev/vfio/<group> to see that no VM uses the device and
# keeps it open while it runs `mdevctl stop`; that open holds no device fd, so the kernel
# removes the device and the service must not count libvirtd as a holder.
nodedev_destroy_stops() {
  local uuid name output
  uuid="$(recall nodedev_uuid)" name="$(recall nodedev_name)"
  output="$(virsh_sys nodedev-destroy "$name" 2>&1)" || { echo "nodedev-destroy $name: $output"; return 1; }
  [ ! -e "/sys/bus/mdev/devices/$uuid" ] || { echo "mdev $uuid still exists after nodedev-destroy"; return 1; }
  expect_equal "vgpuctl state of $uuid" "no yes yes" "$(nodedev_state "$uuid")" >/dev/null || return 1
  wait_until 30 nodedev_listed "$uuid" --all || { echo "$name is no longer listed with --all"; return 1; }
  echo "nodedev-destroy $name removed mdev $uuid; the instance stays defined (active no, autostart yes)"
}

nodedev_start() {
  local uuid name output
  uuid="$(recall nodedev_uuid)" name="$(recall nodedev_name)"
  output="$(virsh_sys nodedev-start "$name" 2>&1)" || { echo "nodedev-start $name: $output"; return 1; }
  [ -e "/sys/bus/mdev/devices/$uuid" ] || { echo "mdev $uuid does not exist after nodedev-start"; return 1; }
  expect_equal "vgpuctl state of $uuid" "yes yes yes" "$(nodedev_state "$uuid")" >/dev/null || return 1
  wait_until 30 nodedev_listed "$uuid" || { echo "$name is not listed as active after nodedev-start"; return 1; }
  echo "nodedev-start $name created mdev $uuid again; vgpuctl and virsh show it active"
}

# A domain whose only device is a hostdev naming the node device's UUID (no vGPU metadata).
nodedev_domain_start() {
  local uuid output group got
  uuid="$(recall nodedev_uuid)"
  domain_xml vmtier-nodedev "$(new_uuid)" "" "$(mdev_hostdev "$uuid")" >/tmp/vmtier-nodedev-domain.xml
  output="$(timeout 180 virsh -c qemu:///system create /tmp/vmtier-nodedev-domain.xml 2>&1)" ||
    { echo "virsh create: $output"; return 1; }
  group="$(mdev_group "$uuid")"
  got="$(sysfs_open_errno "/dev/vfio/$group")"
  [ "$got" = EBUSY ] || { echo "open of /dev/vfio/$group while the domain runs: $got, expected EBUSY"; return 1; }
  echo "domain vmtier-nodedev runs with mdev $uuid; its QEMU holds /dev/vfio/$group"
}

nodedev_destroy_refused_while_used() {
  local uuid name output status=0
  uuid="$(recall nodedev_uuid)" name="$(recall nodedev_name)"
  output="$(virsh_sys nodedev-destroy "$name" 2>&1)" || status=$?
  [ "$status" != 0 ] || { echo "nodedev-destroy $name succeeded while a domain uses the device"; return 1; }
  [ -e "/sys/bus/mdev/devices/$uuid" ] || { echo "mdev $uuid is gone although the destroy was refused"; return 1; }
  expect_equal "vgpuctl state of $uuid" "yes yes yes" "$(nodedev_state "$uuid")" >/dev/null || return 1
  echo "refused while the domain runs, nothing changed: $(tr '\n' ' ' <<<"$output" | cut -c1-200)"
}

nodedev_domain_stop() {
  timeout 120 virsh -c qemu:///system destroy vmtier-nodedev >/dev/null 2>&1 || true
}

nodedev_undefine() {
  local uuid name output
  uuid="$(recall nodedev_uuid)" name="$(recall nodedev_name)"
  output="$(virsh_sys nodedev-destroy "$name" 2>&1)" || { echo "nodedev-destroy $name: $output"; return 1; }
  output="$(virsh_sys nodedev-undefine "$name" 2>&1)" || { echo "nodedev-undefine $name: $output"; return 1; }
  expect_equal "vgpuctl state of $uuid" "absent" "$(nodedev_state "$uuid")" >/dev/null || return 1
  wait_until 30 eval '! nodedev_listed '"$uuid"' --all' || { echo "$name still listed with --all after nodedev-undefine"; return 1; }
  echo "nodedev-destroy then nodedev-undefine $name: the instance is gone from vgpuctl and virsh"
}

nodedev_autostart() {
  local uuid name output
  uuid="$(recall nodedev_uuid)" name="$(recall nodedev_name)"
  output="$(virsh_sys nodedev-autostart --disable "$name" 2>&1)" || { echo "virsh nodedev-autostart --disable $name: $output"; return 1; }
  expect_equal "vgpuctl state of $uuid after --disable" "yes yes no" "$(nodedev_state "$uuid")" || return 1
  wait_until 30 eval 'virsh_sys nodedev-info '"$name"' | grep -Eq "^Autostart: +no"' ||
    { echo "nodedev-info $name after --disable: $(virsh_sys nodedev-info "$name" 2>&1 | tr '\n' ' ')"; return 1; }
  output="$(virsh_sys nodedev-autostart "$name" 2>&1)" || { echo "virsh nodedev-autostart $name: $output"; return 1; }
  expect_equal "vgpuctl state of $uuid after enable" "yes yes yes" "$(nodedev_state "$uuid")" || return 1
  wait_until 30 eval 'virsh_sys nodedev-info '"$name"' | grep -Eq "^Autostart: +yes"' ||
    { echo "nodedev-info $name after enable: $(virsh_sys nodedev-info "$name" 2>&1 | tr '\n' ' ')"; return 1; }
  echo "nodedev-autostart --disable then enable: vgpuctl autostart no, then yes; nodedev-info agrees"
}

nodedev_define_virtual_parent() {
  local uuid output status=0 before after
  uuid="$(new_uuid)"
  before="$(vgpuctl --json list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')"
  cat >/tmp/vmtier-nodedev.xml <<XML
<device>
  <parent>computer</parent>
  <capability type='mdev'>
    <type id='mtty-2'/>
    <uuid>$uuid</uuid>
  </capability>
</device>
XML
  output="$(virsh_sys nodedev-define /tmp/vmtier-nodedev.xml 2>&1)" || status=$?
  [ "$status" != 0 ] || { echo "libvirt defined an mdev on a parent without an address: $output"; return 1; }
  after="$(vgpuctl --json list | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')"
  expect_equal "instances after the refused define" "$before" "$after" >/dev/null || return 1
  echo "refused by libvirt, nothing changed: $(tr '\n' ' ' <<<"$output" | cut -c1-160)"
}
