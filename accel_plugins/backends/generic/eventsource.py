"""Which uevents can reach this process, the kernel's or udevd's, and why.

Two facts decide it (both checked by tests/e2e/test_generic_netns.py with a
network namespace of its own):

- The kernel sends every uevent on NETLINK_KOBJECT_UEVENT multicast group 1
  into each network namespace owned by the initial user namespace: since
  Linux 4.18 (lib/kobject_uevent.c, uevent_net_init: "Restrict uevents to
  initial user namespace") a namespace's uevent socket joins the broadcast
  list only when ``net->user_ns == &init_user_ns``. A pod's network namespace
  is made by the container runtime as root, so the pod gets them; a pod with
  its own user namespace (``hostUsers: false``) gets none.
- udevd sends its processed copy (rules run, /run/udev/data written) on group 2
  from its own socket, in its own network namespace: only a process sharing
  the host's network (``hostNetwork: true``) hears it.

So ``auto`` takes udevd's events only when udevd listens in this network
namespace, seen in ``/proc/self/net/netlink``, which lists the netlink sockets
of the reader's namespace: udevd's kernel-event socket is a
NETLINK_KOBJECT_UEVENT socket bound to group 1. Whenever that cannot be told,
the kernel's events are the safe side: they arrive in the host's namespace too.
Nothing here imports pyudev; it reads three small /proc files once.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

NETLINK_KOBJECT_UEVENT = 15
KERNEL_GROUP = 0x1
# /proc/self/uid_map of the initial user namespace: every ID mapped to itself.
INITIAL_UID_MAP = ("0", "0", "4294967295")


class UdevSource(enum.StrEnum):
    AUTO = "auto"  # udev when udevd listens in this network namespace, else kernel
    UDEV = "udev"
    KERNEL = "kernel"
    OFF = "off"


@dataclass(frozen=True, slots=True)
class EventPaths:
    """Where the facts are read; parameters so tests point them at their own files."""

    udev_control: Path = Path("/run/udev/control")
    netlink_table: Path = Path("/proc/self/net/netlink")
    uid_map: Path = Path("/proc/self/uid_map")
    own_fds: Path = Path("/proc/self/fd")
    # udevd's database: ID_* properties of a device appear here after its kernel uevent.
    udev_data: Path = Path("/run/udev/data")


@dataclass(frozen=True, slots=True)
class SourceChoice:
    """The source to open, a sentence saying why, and whether events may never come."""

    source: UdevSource
    reason: str
    doubtful: bool = False


def choose_source(asked: UdevSource, paths: EventPaths | None = None) -> SourceChoice:
    paths = paths or EventPaths()
    if asked is UdevSource.OFF:
        return SourceChoice(asked, "as asked (--udev-source off): inotify and rescans only")
    udevd_here = udevd_listens_here(paths)
    if asked is UdevSource.UDEV:
        if udevd_here is False:
            return SourceChoice(
                asked,
                "as asked (--udev-source udev), but no udevd listens in this network "
                "namespace: its events will not arrive (use kernel or auto in a pod "
                "without hostNetwork)",
                doubtful=True,
            )
        return SourceChoice(asked, "as asked (--udev-source udev)")
    if asked is UdevSource.KERNEL:
        return _kernel("as asked (--udev-source kernel)", paths)
    if not paths.udev_control.exists():
        return _kernel(f"no udevd ({paths.udev_control} is absent)", paths)
    if udevd_here:
        return SourceChoice(
            UdevSource.UDEV, "udevd listens in this network namespace (host network)"
        )
    if udevd_here is None:
        return _kernel(
            f"{paths.netlink_table} is unreadable, so where udevd listens is unknown; "
            "the kernel's uevents reach every namespace",
            paths,
        )
    return _kernel(
        "udevd runs in another network namespace (a pod without hostNetwork): "
        "its events stay there, the kernel's reach this one",
        paths,
    )


def _kernel(reason: str, paths: EventPaths) -> SourceChoice:
    if initial_user_namespace(paths) is False:
        return SourceChoice(
            UdevSource.KERNEL,
            f"{reason}; but this process is in a user namespace of its own, whose network "
            "namespaces the kernel sends no uevents: rescans carry hotplug",
            doubtful=True,
        )
    return SourceChoice(UdevSource.KERNEL, reason)


def udevd_listens_here(paths: EventPaths) -> bool | None:
    """Does another process in this network namespace listen to the kernel's uevents?

    That is udevd (or eudev, or mdev -d). Our own sockets are left out by
    inode, so a monitor this process still holds (a backend being replaced on
    a config reload) does not count. None: the table cannot be read.
    """
    try:
        lines = paths.netlink_table.read_text().splitlines()[1:]
    except OSError:
        return None
    ours = _own_socket_inodes(paths.own_fds)
    for line in lines:
        # sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode (net/netlink/af_netlink.c)
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            protocol, port, groups = int(fields[1]), int(fields[2]), int(fields[3], 16)
        except ValueError:
            continue
        if protocol != NETLINK_KOBJECT_UEVENT or port == 0:  # port 0: the kernel's own
            continue
        if groups & KERNEL_GROUP and fields[9] not in ours:
            return True
    return False


def initial_user_namespace(paths: EventPaths) -> bool | None:
    try:
        return tuple(paths.uid_map.read_text().split()) == INITIAL_UID_MAP
    except OSError:
        return None


def _own_socket_inodes(fd_dir: Path) -> set[str]:
    inodes: set[str] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes
