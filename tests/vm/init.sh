#!/bin/busybox sh
# /init of the VM tier's initramfs (busybox). Builds the guest's root from the host's: the
# host's / over 9p (read-only) under a tmpfs overlay, so the guest runs the host's binaries and
# can still write anywhere; the unpacked kernel's modules at /lib/modules/<version>; the
# results share mounted read-write at the same path as on the host. Then hands over to the
# guest script named on the kernel command line.
export PATH=/bin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

die() {
  echo "vmtier-init: $*"
  echo o >/proc/sysrq-trigger
  sleep 30
}

for arg in $(cat /proc/cmdline); do
  case "$arg" in
    vmtier.script=*) script="${arg#vmtier.script=}" ;;
    vmtier.kver=*) kver="${arg#vmtier.kver=}" ;;
    vmtier.modules=*) modules="${arg#vmtier.modules=}" ;;
    vmtier.out=*) out="${arg#vmtier.out=}" ;;
  esac
done
[ -n "$script" ] && [ -n "$kver" ] && [ -n "$modules" ] && [ -n "$out" ] || die "missing vmtier.* arguments"

for module in $(cat /modules/order); do
  insmod "/modules/$module" || die "insmod $module failed"
done

mkdir -p /host /layer /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 root /host || die "cannot mount the host root over 9p"
mount -t tmpfs -o mode=0755 layer /layer
mkdir -p /layer/upper /layer/work
mount -t overlay -o lowerdir=/host,upperdir=/layer/upper,workdir=/layer/work,xino=off overlay /newroot \
  || die "cannot mount the overlay root"
# A clean /tmp, /run and /var/tmp, except one that holds the checkout (CI may clone under
# /tmp): covering it would hide the project's binaries and the results share's mount point, so
# that one keeps the host's view through the overlay.
for dir in /tmp /run /var/tmp; do
  case "$out/" in
    "$dir"/*) continue ;;
  esac
  mount -t tmpfs -o mode=1777 tmpfs "/newroot$dir"
done
mkdir -p "/newroot/lib/modules/$kver"
mount --bind "/host$modules" "/newroot/lib/modules/$kver" || die "cannot bind the modules"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out "/newroot$out" || die "cannot mount the results share"

mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev

# switch_root keeps this PATH=/bin; the guest wants the host's full one.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root VMTIER_OUT="$out" VMTIER_KVER="$kver"
exec switch_root /newroot /bin/bash "$script"
