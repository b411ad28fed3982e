"""Facts read from sysfs: which NUMA node a device node's hardware sits on."""

from __future__ import annotations

import os
import stat

from accel_plugins.backends.generic.hostfs import HostPaths


def numa_node(host: HostPaths, host_node: str) -> int | None:
    """The NUMA node of the device behind ``host_node``, or None when it has none.

    /sys/dev/{char,block}/MAJ:MIN leads to the device; the nearest ancestor
    with a ``numa_node`` attribute (usually the PCI function) tells the node,
    -1 meaning "no particular node".
    """
    try:
        info = os.stat(host.local(host_node))
    except OSError:
        return None
    if stat.S_ISCHR(info.st_mode):
        kind = "char"
    elif stat.S_ISBLK(info.st_mode):
        kind = "block"
    else:
        return None
    link = host.sys("dev", kind, f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}")
    if not os.path.lexists(link):
        return None
    device = os.path.realpath(link)
    top = os.path.realpath(host.sys("devices"))
    while device.startswith(top + "/"):
        value = _read_int(os.path.join(device, "numa_node"))
        if value is not None:
            return value if value >= 0 else None
        device = os.path.dirname(device)
    return None


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None
