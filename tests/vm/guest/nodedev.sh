# libvirt's node-device API driving mdev-manager through the mdevctl-compatible command (issue 17,
# item 5), sourced by checks.sh. libvirtd runs with a directory holding `mdevctl` ->
# mdev-manager-mdevctl first on its PATH (Debian 12's libvirt 9.0 runs the bare name `mdevctl`,
# found on PATH: its nodedev driver carries no fixed path; the first check shows that), and the
# service runs. An mtty instance made with `vgpuctl create --autostart` appears in
# `virsh nodedev-list --cap mdev --all`; then `nodedev-destroy`, `nodedev-start`,
# `nodedev-autostart [--disable]` and `nodedev-undefine` on it go through our command, and
# `vgpuctl list` agrees after each step. `nodedev-define`/`nodedev-create` need a parent that
# libvirt can give an address (a PCI, CCW or AP device): the kernel's sample parents (mtty,
# mbochs, mdpy) are virtual devices, so libvirt refuses before it runs mdevctl; the last check
# shows that refusal leaves nothing behind (docs/libvirt.md, known gaps).

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
  check nodedev.destroy_stops_keeps_definition nodedev_destroy
  check nodedev.start_runs_it_again nodedev_start
  check nodedev.autostart_disable_and_enable nodedev_autostart
  check nodedev.undefine_removes_the_instance nodedev_undefine
  check nodedev.define_on_virtual_parent_refused_by_libvirt nodedev_define_virtual_parent
  nodedev_cleanup
}

nodedev_cleanup() {
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

nodedev_destroy() {
  local uuid name output
  uuid="$(recall nodedev_uuid)" name="$(recall nodedev_name)"
  output="$(virsh_sys nodedev-destroy "$name" 2>&1)" || { echo "virsh nodedev-destroy $name: $output"; return 1; }
  [ ! -e "/sys/bus/mdev/devices/$uuid" ] || { echo "mdev $uuid still in sysfs after nodedev-destroy"; return 1; }
  expect_equal "vgpuctl state of $uuid" "no yes yes" "$(nodedev_state "$uuid")" || return 1
  wait_until 30 eval '! nodedev_listed '"$uuid" || { echo "$name still listed as active"; return 1; }
  nodedev_listed "$uuid" --all || { echo "$name no longer listed with --all (the definition should stay)"; return 1; }
  echo "nodedev-destroy $name: device gone from sysfs, the definition stays (vgpuctl: stopped, persistent, autostart)"
}

nodedev_start() {
  local uuid name output
  uuid="$(recall nodedev_uuid)" name="$(recall nodedev_name)"
  output="$(virsh_sys nodedev-start "$name" 2>&1)" || { echo "virsh nodedev-start $name: $output"; return 1; }
  [ -e "/sys/bus/mdev/devices/$uuid" ] || { echo "mdev $uuid not in sysfs after nodedev-start"; return 1; }
  [[ "$(basename "$(readlink "/sys/bus/mdev/devices/$uuid/mdev_type")")" == mtty-* ]] || { echo "$uuid is not an mtty mdev"; return 1; }
  expect_equal "vgpuctl state of $uuid" "yes yes yes" "$(nodedev_state "$uuid")" || return 1
  wait_until 30 nodedev_listed "$uuid" || { echo "$name not listed as active after nodedev-start"; return 1; }
  echo "nodedev-start $name: running again, listed as active; vgpuctl agrees"
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

nodedev_undefine() {
  local uuid name output
  uuid="$(recall nodedev_uuid)" name="$(recall nodedev_name)"
  output="$(virsh_sys nodedev-destroy "$name" 2>&1)" || { echo "virsh nodedev-destroy $name: $output"; return 1; }
  output="$(virsh_sys nodedev-undefine "$name" 2>&1)" || { echo "virsh nodedev-undefine $name: $output"; return 1; }
  expect_equal "vgpuctl state of $uuid" "absent" "$(nodedev_state "$uuid")" || return 1
  [ ! -e "/etc/mdevctl.d/mtty/$uuid" ] || { echo "/etc/mdevctl.d/mtty/$uuid still there"; return 1; }
  wait_until 30 eval '! nodedev_listed '"$uuid"' --all' || { echo "$name still listed with --all after undefine"; return 1; }
  echo "nodedev-destroy + nodedev-undefine $name: gone from vgpuctl, /etc/mdevctl.d and virsh"
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
