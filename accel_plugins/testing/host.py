"""``FakeHost``: a host's ``/dev`` and ``/sys`` (and any other path) in a temp dir.

Device nodes are real (``mknod``), so a backend's ``is_char_device()`` or
``S_ISCHR`` check sees what it would on a node; creating them needs
CAP_MKNOD (root), and without it the calling test is skipped. sysfs is a tree
of plain files and relative symlinks shaped like the kernel's: devices under
``/sys/devices``, ``/sys/dev/{char,block}/MAJ:MIN`` links, ``/sys/class`` and
``/sys/bus`` links, and attribute files such as ``numa_node``.

Methods take host paths (``/dev/fpga0``, ``/sys/class/fpga/fpga0/errors``);
point the backend's ``--dev-root`` at :attr:`FakeHost.dev` and its
``--sys-root`` at :attr:`FakeHost.sys`.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

import pytest

__all__ = ["FakeHost"]


class FakeHost:
    """A fake host filesystem rooted at ``root`` (created, with ``dev/`` and ``sys/devices/``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dev = self.root / "dev"
        self.sys = self.root / "sys"
        self.dev.mkdir(parents=True, exist_ok=True)
        (self.sys / "devices").mkdir(parents=True, exist_ok=True)
        self._next_minor = 0

    # -- paths ---------------------------------------------------------------------------

    def local(self, host_path: str) -> Path:
        """Where the host path ``host_path`` (absolute, e.g. ``/dev/fpga0``) lives here."""
        if not host_path.startswith("/") or ".." in Path(host_path).parts:
            raise ValueError(f"{host_path!r}: want an absolute host path without '..'")
        return self.root / host_path.lstrip("/")

    def _sys_dir(self, devpath: str | Path) -> Path:
        """A sysfs directory given as a devpath under /sys/devices, a /sys host path or a Path."""
        if isinstance(devpath, Path):
            return devpath
        if devpath.startswith("/"):
            return self.local(devpath)
        return self.sys / "devices" / devpath

    # -- /dev and plain files ------------------------------------------------------------

    def node(
        self,
        host_path: str,
        *,
        major: int = 188,
        minor: int | None = None,
        block: bool = False,
        mode: int = 0o600,
    ) -> tuple[int, int]:
        """Create a character (or block) device node; return its ``(major, minor)``.

        ``minor`` defaults to a counter, so nodes made without one never clash.
        Skips the calling test when the process may not create device nodes.
        """
        if minor is None:
            minor = self._next_minor
            self._next_minor += 1
        path = self.local(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        kind = stat.S_IFBLK if block else stat.S_IFCHR
        try:
            os.mknod(path, mode | kind, os.makedev(major, minor))
        except PermissionError:
            pytest.skip("creating device nodes needs CAP_MKNOD (run the tests as root)")
        return major, minor

    def regular_file(self, host_path: str, text: str = "not a device\n") -> Path:
        """Create (or replace) a regular file, e.g. a /dev entry that is not a device."""
        path = self.local(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def write(self, host_path: str, value: str) -> Path:
        """Write a file's content as sysfs shows it (``value`` plus a newline).

        Follows symlinks, so ``/sys/class/fpga/fpga0/errors`` writes the
        attribute in the device's directory under /sys/devices.
        """
        return self.regular_file(host_path, value + "\n")

    def remove(self, host_path: str) -> None:
        """Remove a node, file, symlink or whole directory (hot-unplug)."""
        path = self.local(host_path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()

    # -- /sys ----------------------------------------------------------------------------

    def sys_device(
        self,
        devpath: str,
        attributes: Mapping[str, str] = {},
        *,
        dev: tuple[int, int] | None = None,
        block: bool = False,
        numa_node: int | None = None,
    ) -> Path:
        """``/sys/devices/<devpath>`` with one file per attribute; returns its directory.

        ``dev`` adds the ``/sys/dev/{char,block}/MAJ:MIN`` link (how udev and
        the generic backend go from a node to its device); ``numa_node`` writes
        that attribute (-1 is the kernel's "no particular node").
        """
        directory = self.sys / "devices" / devpath
        directory.mkdir(parents=True, exist_ok=True)
        values = dict(attributes)
        if numa_node is not None:
            values["numa_node"] = str(numa_node)
        for name, value in values.items():
            (directory / name).write_text(value + "\n")
        if dev is not None:
            links = self.sys / "dev" / ("block" if block else "char")
            links.mkdir(parents=True, exist_ok=True)
            self._link(links / f"{dev[0]}:{dev[1]}", directory)
        return directory

    def set_attribute(self, device: str | Path, name: str, value: str) -> None:
        """Write attribute ``name`` of a sysfs device (a devpath, a /sys host path or a Path)."""
        (self._sys_dir(device) / name).write_text(value + "\n")

    def pci_device(
        self,
        address: str,
        *,
        numa_node: int | None = None,
        attributes: Mapping[str, str] = {},
    ) -> str:
        """A PCI function (``0000:3b:00.0``) under its root bus, linked from
        ``/sys/bus/pci/devices``; returns its devpath (``pci0000:3b/0000:3b:00.0``)."""
        domain, bus = address.split(":")[:2]
        devpath = f"pci{domain}:{bus}/{address}"
        directory = self.sys_device(devpath, attributes, numa_node=numa_node)
        self._link(self.sys / "bus" / "pci" / "devices" / address, directory)
        return devpath

    def class_device(
        self,
        subsystem: str,
        name: str,
        *,
        parent: str | None = None,
        dev: tuple[int, int] | None = None,
        block: bool = False,
        attributes: Mapping[str, str] = {},
    ) -> Path:
        """A class device laid out as the kernel does; returns its directory.

        It lives at ``/sys/devices/<parent>/<subsystem>/<name>`` (under
        ``virtual/`` without a parent) and is linked from
        ``/sys/class/<subsystem>/<name>``; with a parent it has a ``device``
        link to it (so ``/sys/class/<subsystem>/<name>/device/numa_node``
        reads the parent's), and with ``dev`` a ``dev`` attribute and the
        ``/sys/dev`` link.
        """
        devpath = f"{parent or 'virtual'}/{subsystem}/{name}"
        values = dict(attributes)
        if dev is not None:
            values.setdefault("dev", f"{dev[0]}:{dev[1]}")
        directory = self.sys_device(devpath, values, dev=dev, block=block)
        if parent is not None:
            self._link(directory / "device", self.sys / "devices" / parent)
        self._link(self.sys / "class" / subsystem / name, directory)
        return directory

    def usb_device(
        self, name: str, vendor: str, product: str, *, bus: int, address: int, serial: str = ""
    ) -> str:
        """A USB device in sysfs and its /dev/bus/usb node; returns the node's host path."""
        attributes = {
            "idVendor": vendor,
            "idProduct": product,
            "busnum": str(bus),
            "devnum": str(address),
        }
        if serial:
            attributes["serial"] = serial
        directory = self.sys_device(f"pci0000:00/usb{bus}/{name}", attributes)
        self._link(self.sys / "bus" / "usb" / "devices" / name, directory)
        node = f"/dev/bus/usb/{bus:03d}/{address:03d}"
        self.node(node, major=189, minor=(bus - 1) * 128 + address - 1)
        return node

    @staticmethod
    def _link(link: Path, target: Path) -> None:
        """A relative symlink, as sysfs has, so the tree can be moved or bind-mounted."""
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(target, link.parent))
