//! The libvirt qemu hook for mdev-manager.
