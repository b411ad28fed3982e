"""Fixtures for the generic /dev backend: a fake host /dev and /sys in a temp dir.

Device nodes are real (``mknod``), so health checks see true character and
block devices; sysfs is a tree of plain files and relative symlinks shaped
like the kernel's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.monitor import UdevSource
from accel_plugins.plugin.device import DeviceTree


class FakeHost:
    """A host's /dev and /sys under ``root``; methods take host paths like /dev/ttyUSB0."""

    def __init__(self, root: Path) -> None:
        self.dev = root / "dev"
        self.sys = root / "sys"
        self.dev.mkdir(parents=True)
        (self.sys / "devices").mkdir(parents=True)
        self._next_minor = 0

    def local(self, host_path: str) -> Path:
        assert host_path.startswith("/dev/"), host_path
        return self.dev / host_path.removeprefix("/dev/")

    def node(
        self, host_path: str, *, major: int = 188, minor: int | None = None, block: bool = False
    ) -> tuple[int, int]:
        """Create a character (or block) device node; returns its major:minor."""
        if minor is None:
            minor = self._next_minor
            self._next_minor += 1
        path = self.local(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        kind = stat.S_IFBLK if block else stat.S_IFCHR
        try:
            os.mknod(path, 0o600 | kind, os.makedev(major, minor))
        except PermissionError:
            pytest.skip("creating device nodes needs CAP_MKNOD (run the tests as root)")
        return major, minor

    def regular_file(self, host_path: str) -> None:
        path = self.local(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not a device\n")

    def remove(self, host_path: str) -> None:
        self.local(host_path).unlink()

    def sys_device(
        self,
        devpath: str,
        attributes: Mapping[str, str] = {},  # noqa: B006 - read only
        *,
        dev: tuple[int, int] | None = None,
        block: bool = False,
    ) -> Path:
        """/sys/devices/<devpath> with attribute files; ``dev`` adds /sys/dev/<kind>/M:m."""
        directory = self.sys / "devices" / devpath
        directory.mkdir(parents=True, exist_ok=True)
        for name, value in attributes.items():
            (directory / name).write_text(value + "\n")
        if dev is not None:
            links = self.sys / "dev" / ("block" if block else "char")
            links.mkdir(parents=True, exist_ok=True)
            link = links / f"{dev[0]}:{dev[1]}"
            link.symlink_to(os.path.relpath(directory, links))
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
        bus_dir = self.sys / "bus" / "usb" / "devices"
        bus_dir.mkdir(parents=True, exist_ok=True)
        (bus_dir / name).symlink_to(os.path.relpath(directory, bus_dir))
        node = f"/dev/bus/usb/{bus:03d}/{address:03d}"
        self.node(node, major=189, minor=(bus - 1) * 128 + address - 1)
        return node

    def settings(self, **overrides: Any) -> GenericSettings:
        values: dict[str, Any] = {
            "dev_root": self.dev,
            "sys_root": self.sys,
            "udev_source": UdevSource.OFF,
        }
        return GenericSettings(**(values | overrides))


@pytest.fixture
def fake_host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path / "host")


WriteConfig = Callable[[str], Path]


@pytest.fixture
def write_config(tmp_path: Path) -> WriteConfig:
    """Write YAML (dedented) to ``config.yaml`` in the test's temp dir."""

    def write(text: str) -> Path:
        path = tmp_path / "config.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    return write


class Published:
    """A Publish callback that records every tree and lets tests await one."""

    def __init__(self) -> None:
        self.trees: list[DeviceTree] = []
        self._changed = asyncio.Event()

    def __call__(self, tree: DeviceTree) -> None:
        self.trees.append(tree)
        self._changed.set()

    @property
    def last(self) -> DeviceTree:
        return self.trees[-1]

    async def wait_for(
        self, predicate: Callable[[DeviceTree], bool], timeout: float = 5.0
    ) -> DeviceTree:
        """The first tree, old or new, satisfying ``predicate``, checked from the latest."""
        async with asyncio.timeout(timeout):
            while True:
                if self.trees and predicate(self.trees[-1]):
                    return self.trees[-1]
                self._changed.clear()
                await self._changed.wait()


RunBackend = Callable[[GenericBackend], Awaitable[Published]]


@pytest.fixture
async def run_backend() -> AsyncIterator[RunBackend]:
    """Factory: run a backend in a task until the test ends; returns its Published."""
    tasks: list[asyncio.Task[None]] = []

    async def start(backend: GenericBackend) -> Published:
        published = Published()
        tasks.append(asyncio.create_task(backend.run(published)))
        await published.wait_for(lambda tree: True)
        return published

    yield start
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
