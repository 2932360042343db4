# Crash torture on the real kernel (issue 16, item 5), sourced by checks.sh: the service runs on
# the real sysfs with its state in /var/lib/mdev-manager; each round starts a few
# `vgpuctl create` calls on mtty and mbochs, kills the daemon with SIGKILL after a random delay
# spread over twice the time one create takes on this guest (so the kill lands before, inside
# or after a create write, or inside the state write),
# restarts it and checks that every mdev on the host is managed by the service or was there
# before the rounds began (a foreign mdev made with a direct sysfs write). A device a kill left
# that the service neither manages nor removed is an orphan: its capacity would be lost until
# an administrator acted. 20 rounds; the last check destroys what the rounds made and shows the
# foreign mdev untouched.

TORTURE_ROUNDS=20
TORTURE_PROFILES=(mtty mbochs-small mtty-dual)

group_torture() {
  if [ ! -x "$bin/mdev-manager" ] || [ ! -x "$bin/vgpuctl" ]; then
    skip torture "mdev-manager or vgpuctl is not built"
    return
  fi
  remove_all_mdevs
  modprobe mtty && modprobe mbochs count=64 || { fail torture.start "modprobe mtty/mbochs failed"; return; }
  check torture.start torture_start || return
  check torture.kill_during_creates torture_kill_rounds
  check torture.cleanup torture_cleanup
}

# The bus (unless an earlier group started it), a foreign mdev, the daemon.
torture_start() {
  if [ ! -S /run/dbus/system_bus_socket ]; then
    product_start_bus || return 1
  fi
  local foreign
  foreign="$(create_mdev mtty mtty-1)" || { echo "creating the foreign mdev failed"; return 1; }
  remember torture_foreign "$foreign"
  torture_start_daemon || return 1
  # How long one create takes here (a debug build under TCG on a busy host: seconds): the
  # kills are spread over twice that, so they land before, inside and after the create writes.
  local started uuid took
  started="$(awk '{ printf "%d", $1 * 1000 }' /proc/uptime)"
  uuid="$(vgpuctl create mtty)" || { echo "a timing create failed: $uuid"; return 1; }
  took=$(($(awk '{ printf "%d", $1 * 1000 }' /proc/uptime) - started))
  vgpuctl destroy "$uuid" >/dev/null || { echo "destroying the timing create $uuid failed"; return 1; }
  remember torture_create_ms "$took"
  echo "foreign mdev $foreign; mdev-manager (pid $(recall daemon_pid)) answers; one create took $took ms"
}

# The product group's start_daemon with a longer bound: the start-up reconcile of a debug build
# under TCG took 16-25 s on a loaded host (the product group's 30 s was too tight for 20
# restarts in a row).
torture_start_daemon() {
  NO_COLOR=1 "$bin/mdev-manager" >>"$out/daemon.log" 2>&1 &
  remember daemon_pid $!
  wait_until 180 eval 'vgpuctl status >/dev/null 2>&1' || { echo "the daemon did not answer within 180 s"; return 1; }
}

# torture_unmanaged: the mdevs on the host that the service does not list as managed and that
# were not there before the rounds, one a line ("vgpuctl list" failing prints ERROR).
torture_unmanaged() {
  local managed foreign
  foreign="$(recall torture_foreign)"
  managed="$(vgpuctl --json list | python3 -c 'import json,sys; print(" ".join(i["uuid"] for i in json.load(sys.stdin) if i.get("owner")))')" ||
    { echo ERROR; return; }
  for dev in /sys/bus/mdev/devices/*; do
    [ -e "$dev" ] || continue
    local uuid
    uuid="$(basename "$dev")"
    [ "$uuid" = "$foreign" ] && continue
    [[ " $managed " == *" $uuid "* ]] || echo "$uuid"
  done
}

torture_kill_rounds() {
  local round pid delay started acked=0 interrupted=0 orphans="" left
  for round in $(seq 1 "$TORTURE_ROUNDS"); do
    pid="$(recall daemon_pid)"
    local callers=()
    for _ in $(seq 1 $((1 + RANDOM % 3))); do
      (vgpuctl create "${TORTURE_PROFILES[$((RANDOM % ${#TORTURE_PROFILES[@]}))]}" >/dev/null 2>&1) &
      callers+=("$!")
    done
    # Anywhere from before the first call arrives to after the last reply.
    delay="$((RANDOM % (2 * $(recall torture_create_ms) + 1)))"
    sleep "$(awk -v d="$delay" 'BEGIN { printf "%.3f", d / 1000 }')"
    kill -9 "$pid" 2>/dev/null
    wait_until 10 eval '! running '"$pid" || { echo "round $round: the daemon survived kill -9"; return 1; }
    for caller in "${callers[@]}"; do
      if wait "$caller"; then acked=$((acked + 1)); else interrupted=$((interrupted + 1)); fi
    done
    torture_start_daemon || { echo "round $round: the daemon did not come back (daemon.log)"; return 1; }
    left="$(torture_unmanaged)"
    [ "$left" != ERROR ] || { echo "round $round: vgpuctl list failed after the restart"; return 1; }
    if [ -n "$left" ]; then
      orphans+=" round $round (kill after ${delay} ms): $(echo $left)"
    fi
    started="$(ls /sys/bus/mdev/devices | wc -l)"
    # Keep the parents from filling up: destroy what the rounds made once mbochs is half full.
    if [ "$started" -gt 24 ]; then
      torture_destroy_managed >/dev/null || { echo "round $round: destroying the managed instances failed"; return 1; }
    fi
  done
  [ -z "$orphans" ] || { echo "orphaned mdevs (on the host, neither managed nor there before):$orphans"; return 1; }
  local undone
  undone="$(grep -c 'undid an unacknowledged change' "$out/daemon.log")"
  echo "$TORTURE_ROUNDS kills: $acked creates acknowledged, $interrupted interrupted, $undone unacknowledged creates undone by reconcile, every mdev managed or foreign after each restart"
}

torture_destroy_managed() {
  local uuids
  uuids="$(vgpuctl --json list | python3 -c 'import json,sys; print(" ".join(i["uuid"] for i in json.load(sys.stdin) if i.get("owner")))')" || return 1
  [ -z "$uuids" ] && return 0
  # shellcheck disable=SC2086
  vgpuctl destroy --force $uuids
}

torture_cleanup() {
  local foreign left
  foreign="$(recall torture_foreign)"
  torture_destroy_managed >/dev/null || { echo "destroying the managed instances failed"; return 1; }
  left="$(ls /sys/bus/mdev/devices | grep -v "^$foreign\$" | tr '\n' ' ')"
  [ -z "$left" ] || { echo "left behind after destroying every managed instance: $left"; return 1; }
  [ -d "/sys/bus/mdev/devices/$foreign" ] || { echo "the foreign mdev $foreign went"; return 1; }
  product_stop
  echo "every managed instance destroyed; the foreign mdev $foreign kept; daemon stopped"
}
