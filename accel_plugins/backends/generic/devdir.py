"""Directory device paths (``path: /dev/snd``): what a container gets for one.

squat's generic-device-plugin hands a matched directory to the kubelet as one
DeviceSpec (host and container path the directory), and the runtime expands
it: containerd's CRI plugin passes each DeviceSpec to ``oci.WithDevices``,
whose ``getDevices`` walks a directory and adds every character or block node
inside it, recursing into subdirectories, at the container path joined with
the entry's name. We hand over the same single DeviceSpec (so the kubelet's
checkpoint and the container match squat's), and use the same walk where we
must name the nodes ourselves: a CDI spec's ``deviceNodes`` must each be a
device (the CDI library refuses anything else with "not a device node"), and
the NUMA node of a directory is that of the devices in it.

The walk follows containerd's ``getDevices`` (pkg/oci/utils_unix.go):
entries in name order; subdirectories ``pts``, ``shm``, ``fd``, ``mqueue``,
``.lxc``, ``.lxd-mounts`` and ``.udev`` skipped; an entry named ``console``
skipped; symbolic links neither followed nor taken (``by-path`` aliases
would add a node twice); FIFOs and plain files skipped.
"""

from __future__ import annotations

import os
import stat

from accel_plugins.backends.generic.hostfs import HostPaths
from accel_plugins.plugin.device import DeviceNode

# containerd's getDevices leaves these subdirectories out of a walk.
SKIPPED_DIRS = frozenset({"pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"})
SKIPPED_NAMES = frozenset({"console"})


def is_dir(host: HostPaths, host_path: str) -> bool:
    """True when the host path is a directory (after links, as the runtime resolves them)."""
    try:
        return stat.S_ISDIR(os.stat(host.local(host_path)).st_mode)
    except OSError:
        return False


def expand(host: HostPaths, node: DeviceNode) -> list[DeviceNode]:
    """The device nodes a runtime creates for ``node``: itself, or a directory's walk."""
    if not is_dir(host, node.host_path):
        return [node]
    out: list[DeviceNode] = []
    _walk(host, node.host_path, node.container_path, node.permissions, out)
    return out


def _walk(
    host: HostPaths, host_dir: str, container_dir: str, perms: str, out: list[DeviceNode]
) -> None:
    try:
        entries = sorted(os.scandir(host.local(host_dir)), key=lambda e: e.name)
    except OSError:
        return  # vanished or unreadable between the check and the walk: nothing to add
    for entry in entries:
        host_path = f"{host_dir.rstrip('/')}/{entry.name}"
        container_path = f"{container_dir.rstrip('/')}/{entry.name}"
        try:
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIPPED_DIRS:
                    _walk(host, host_path, container_path, perms, out)
                continue
            if entry.name in SKIPPED_NAMES:
                continue
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            out.append(DeviceNode(host_path, container_path, perms))
