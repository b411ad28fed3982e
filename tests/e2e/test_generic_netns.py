"""Hotplug in a pod's network namespace: real namespaces, real netlink, a real device.

A pod without hostNetwork has a network namespace of its own. There:

- the kernel's uevents (group 1) arrive: lib/kobject_uevent.c sends each one
  into every network namespace owned by the initial user namespace
  (uevent_net_init, "Restrict uevents to initial user namespace", Linux 4.18);
- udevd's events (group 2) do not: udevd sends them from its socket in the
  host's namespace, and a multicast reaches the sender's namespace only.

``unshare --net`` gives each test such a namespace (root only: skipped where
it is refused). The hotplugged device is a loop device made through
/dev/loop-control (LOOP_CTL_ADD, linux/loop.h): a real block device whose
add uevent the kernel sends. Writing ``change`` to a device's sysfs
``uevent`` file makes the kernel send a uevent for it
(Documentation/ABI/testing/sysfs-uevent).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

NETLINK_KOBJECT_UEVENT = 15
KERNEL_GROUP, UDEV_GROUP = 1, 2
LOOP_CTL_ADD, LOOP_CTL_REMOVE = 0x4C80, 0x4C81  # linux/loop.h
NULL_UEVENT = Path("/sys/devices/virtual/mem/null/uevent")
ROOT = Path(__file__).resolve().parents[2]


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


needs_netns = pytest.mark.skipif(
    os.geteuid() != 0 or not _unshare_works(), reason="unshare --net needs root here"
)
needs_uevent_write = pytest.mark.skipif(
    not os.access(NULL_UEVENT, os.W_OK), reason="sysfs is read-only here"
)


def in_own_netns(*args: str) -> list[str]:
    return ["unshare", "--net", sys.executable, *args]


@contextmanager
def stand_in_udevd() -> Iterator[None]:
    """A process listening to the kernel's uevents in this namespace, as udevd does."""
    code = (
        "import socket, sys\n"
        f"s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, {NETLINK_KOBJECT_UEVENT})\n"
        f"s.bind((0, {KERNEL_GROUP}))\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield
    finally:
        process.kill()
        process.wait()


CHOOSE = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from accel_plugins.backends.generic.eventsource import EventPaths, UdevSource, choose_source\n"
    "c = choose_source(UdevSource.AUTO, EventPaths(udev_control=Path(sys.argv[1])))\n"
    "print(json.dumps([c.source.value, c.reason]))\n"
)


@needs_netns
@pytest.mark.parametrize(
    ("own_netns", "expected", "reason"),
    [
        pytest.param(False, "udev", "host network", id="beside-udevd"),
        pytest.param(True, "kernel", "another network namespace", id="pod-network"),
    ],
)
def test_auto_takes_udevd_events_only_in_udevd_namespace(
    tmp_path: Path, own_netns: bool, expected: str, reason: str
) -> None:
    control = tmp_path / "control"  # /run/udev mounted: udevd runs on the node
    control.touch()
    with stand_in_udevd():
        args = ["-c", CHOOSE, str(control)]
        command = in_own_netns(*args) if own_netns else [sys.executable, *args]
        result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=True)
    source, why = json.loads(result.stdout)
    assert source == expected
    assert reason in why


RECEIVE = (
    "import socket, sys\n"
    f"s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, {NETLINK_KOBJECT_UEVENT})\n"
    f"s.bind((0, {KERNEL_GROUP | UDEV_GROUP}))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    message = s.recv(65536)\n"
    "    print(repr(message[:64]), flush=True)\n"
    "    if b'/devices/virtual/mem/null' in message:\n"
    "        break\n"
)


@needs_netns
@needs_uevent_write
def test_udevd_events_stay_in_its_namespace_the_kernels_do_not() -> None:
    """The premise: a group 2 multicast from the host's namespace never reaches
    a pod's, the kernel's uevent sent after it does. Netlink delivers a
    multicast to every listener before sendto returns, so anything of ours
    would be read before the kernel's event: no waiting for an absence."""
    child = subprocess.Popen(in_own_netns("-c", RECEIVE), stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        marker = b"libudev\0marker-of-this-test"
        with (
            socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_KOBJECT_UEVENT) as host,
            socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_KOBJECT_UEVENT) as sender,
        ):
            host.bind((0, UDEV_GROUP))
            sender.sendto(marker, (0, UDEV_GROUP))
            assert host.recv(65536) == marker  # sent: heard in the host's namespace
        NULL_UEVENT.write_text("change")
        out, _ = child.communicate(timeout=20)
    finally:
        child.kill()
        child.wait()
    assert "marker-of-this-test" not in out
    assert "change@/devices/virtual/mem/null" in out


def free_loop_index() -> int:
    if not os.access("/dev/loop-control", os.R_OK | os.W_OK):
        pytest.skip("no /dev/loop-control here")
    taken = {p.name for p in Path("/sys/block").iterdir()}
    free = [i for i in range(400, 1000) if f"loop{i}" not in taken]
    return random.choice(free)


@contextmanager
def loop_device(index: int) -> Iterator[None]:
    """Has the kernel add ``loop<index>`` now, and remove it at the end."""
    control = os.open("/dev/loop-control", os.O_RDWR)
    try:
        try:
            fcntl.ioctl(control, LOOP_CTL_ADD, index)
        except OSError as exc:
            pytest.skip(f"cannot add a loop device: {exc}")
        try:
            yield
        finally:
            with suppress(OSError):
                fcntl.ioctl(control, LOOP_CTL_REMOVE, index)
    finally:
        os.close(control)


@asynccontextmanager
async def backend_in_own_netns(
    tmp_path: Path, config: str, lines: list[dict[str, Any]], changed: asyncio.Event
) -> AsyncIterator[None]:
    control = tmp_path / "control"
    control.touch()
    dev = tmp_path / "dev"  # not /dev: inotify on the real one must not explain a change
    dev.mkdir()
    settings = {
        "config": config,
        "dev_root": str(dev),
        "udev_source": "auto",
        "udev_control": str(control),
    }
    process = await asyncio.create_subprocess_exec(
        *in_own_netns("-m", "tests.support.netns_backend", json.dumps(settings)),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )

    async def read() -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            lines.append(json.loads(line))
            changed.set()

    reader = asyncio.create_task(read())
    try:
        yield
    finally:
        process.kill()
        await process.wait()
        reader.cancel()


async def wait_for(
    lines: list[dict[str, Any]], changed: asyncio.Event, key: str, test: Any
) -> dict[str, Any]:
    async with asyncio.timeout(20):
        while True:
            for line in lines:
                if key in line and test(line[key]):
                    return line
            changed.clear()
            await changed.wait()


@needs_netns
async def test_a_hotplugged_device_reaches_a_backend_in_a_pod_network(tmp_path: Path) -> None:
    """The chart's default (auto) in a pod's namespace, udevd running on the node:
    the kernel's add uevent brings the new device, no rescan timer involved (an hour)."""
    lines: list[dict[str, Any]] = []
    changed = asyncio.Event()
    resource = "accel-plugins.io/disk"
    index = free_loop_index()
    name = f"loop{index}"
    config = f"devices:\n  - name: disk\n    groups:\n      - udev: [{{kernel: {name}}}]\n"
    async with backend_in_own_netns(tmp_path, config, lines, changed):
        await wait_for(lines, changed, "tree", lambda tree: tree == {resource: []})
        # Start-up scans: the first, then one more because its directories were new to
        # inotify (backend.py). After the second the backend only waits for events.
        await wait_for(lines, changed, "scanned", lambda scans: scans == 2)
        added_at = time.monotonic()
        with loop_device(index):
            found = await wait_for(lines, changed, "tree", lambda tree: len(tree[resource]) == 1)
    chosen = await wait_for(lines, changed, "log", lambda log: log.startswith("uevent source"))
    assert chosen["log"].startswith("uevent source: kernel (udevd runs in another network")
    woke = await wait_for(lines, changed, "log", lambda log: "1 devices" in log)
    assert "after udev" in woke["log"]  # a uevent, not inotify or the timer
    assert found["at"] - added_at < 5  # milliseconds in practice; generous for loaded CI
