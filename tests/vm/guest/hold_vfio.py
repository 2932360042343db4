#!/usr/bin/env python3
"""Holds a VFIO device open the way a VMM does, until a file appears (or a time limit passes).

    hold_vfio.py SYSFS_DEVICE_DIR RELEASE_FILE [MAX_SECONDS]

Opens the container and the device's group, attaches the group, sets the type1v2 IOMMU and
gets the device fd; prints "held /dev/vfio/N" once it holds them, then waits for RELEASE_FILE
to exist and closes everything. Used by the guest checks for "remove while held open".
"""
import fcntl
import os
import struct
import sys
import time

VFIO_TYPE, VFIO_BASE = 59, 100


def io(nr):
    # _IO(VFIO_TYPE, VFIO_BASE + nr): no size, no direction bits.
    return (VFIO_TYPE << 8) | (VFIO_BASE + nr)


VFIO_SET_IOMMU = io(2)
VFIO_GROUP_SET_CONTAINER = io(4)
VFIO_GROUP_GET_DEVICE_FD = io(6)
VFIO_TYPE1v2_IOMMU = 3


def main():
    device_dir, release_file = sys.argv[1], sys.argv[2]
    max_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 60
    group = os.path.basename(os.readlink(os.path.join(device_dir, "iommu_group")))
    container = os.open("/dev/vfio/vfio", os.O_RDWR)
    group_fd = os.open(f"/dev/vfio/{group}", os.O_RDWR)
    fcntl.ioctl(group_fd, VFIO_GROUP_SET_CONTAINER, bytearray(struct.pack("i", container)), True)
    fcntl.ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU)
    name = bytearray(os.path.basename(device_dir).encode() + b"\0")
    device_fd = fcntl.ioctl(group_fd, VFIO_GROUP_GET_DEVICE_FD, name, True)
    print(f"held /dev/vfio/{group}", flush=True)
    deadline = time.monotonic() + max_seconds
    while not os.path.exists(release_file) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.close(device_fd)
    os.close(group_fd)
    os.close(container)


if __name__ == "__main__":
    main()
