"""The generic backend when hardware misbehaves: a device unplugged while a pod holds it,
and storms of 1,000 add/remove pairs (inotify on a fake /dev; kernel uevents under
umockdev). The kubelet must end up seeing exactly what is plugged in.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Collection

import pytest

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.discovery import device_id
from accel_plugins.kubelet_emulator import Kubelet, PluginCallError, PluginClient
from accel_plugins.runtime.podresources import PodResourcesCache
from tests.fixtures.framework import StartManager
from tests.fixtures.generic import FakeHost, UmockdevHarness
from tests.reliability.process_usage import usage

SERIAL = "accel-plugins.io/serial"
CONFIG = parse_config(
    textwrap.dedent(
        """
        devices:
          - name: serial
            groups:
              - paths: [{path: /dev/ttyUSB*, permissions: rw}]
        """
    ),
    "serial.yaml",
)
PAIRS = 1_000
NAMES = 8  # the storm cycles through ttyUSB0..7


def tty(n: int) -> str:
    return f"/dev/ttyUSB{n}"


def tty_id(n: int) -> str:
    return device_id(0, [tty(n)])


async def test_a_device_unplugged_while_allocated(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost
) -> None:
    for n in (0, 1):
        fake_host.node(tty(n), minor=n)
    # Whether a pod holds the device comes from the kubelet's own PodResources API.
    assert kubelet.pod_resources_socket is not None
    held_by_pods = PodResourcesCache(kubelet.pod_resources_socket, max_age=0.0)
    settings = fake_host.settings(rescan_interval=0.05, vanished_grace=3600.0)
    await start_manager(lambda: GenericBackend(CONFIG, settings, in_use=held_by_pods.in_use))
    await kubelet.wait_for_resource(SERIAL, allocatable=2)

    record = await kubelet.allocate("pod", "main", SERIAL, 1)
    (held,) = record.device_ids
    unplugged = 0 if held == tty_id(0) else 1
    fake_host.remove(tty(unplugged))

    # Still listed (the pod holds it) but Unhealthy: capacity stays, allocatable drops.
    await kubelet.wait_for(lambda k: k.resources[SERIAL].unhealthy == [held])
    assert kubelet.resources[SERIAL].capacity == 2
    assert kubelet.allocations == [record]
    endpoint = kubelet.plugin_dir / kubelet.registrations[-1].endpoint
    async with PluginClient(endpoint) as client:
        with pytest.raises(PluginCallError, match="unhealthy"):
            await client.allocate([[held]])

    # Once the pod is gone nobody holds it: the device leaves the list.
    kubelet.release("pod")
    await kubelet.wait_for(lambda k: held not in k.resources[SERIAL].devices)
    assert kubelet.resources[SERIAL].healthy == [tty_id(1 - unplugged)]

    # Plugged in again: same path, same ID, Healthy.
    fake_host.node(tty(unplugged), minor=unplugged)
    await kubelet.wait_for(lambda k: k.resources[SERIAL].healthy == sorted(map(tty_id, (0, 1))))


def nothing_held(resource: str) -> Collection[str]:
    return frozenset()


async def test_a_storm_of_add_remove_pairs_ends_in_the_right_state(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost
) -> None:
    # Only inotify may explain what the kubelet sees: the safety-net rescan is an hour away.
    settings = fake_host.settings(rescan_interval=3600.0)
    backends: list[GenericBackend] = []

    def build() -> GenericBackend:
        backends.append(GenericBackend(CONFIG, settings, in_use=nothing_held))
        return backends[-1]

    fake_host.node(tty(7), minor=7)
    await start_manager(build)
    await kubelet.wait_for_resource(SERIAL, allocatable=1)
    before = usage()

    for i in range(PAIRS):
        n = i % NAMES
        if n != 7:
            fake_host.node(tty(n), minor=n)
            fake_host.remove(tty(n))
        if i % 25 == 0:
            await asyncio.sleep(0)  # let scans interleave with the storm
    survivors = [1, 5, 7]
    for n in survivors[:2]:
        fake_host.node(tty(n), minor=n)

    expected = sorted(tty_id(n) for n in survivors)
    await kubelet.wait_for(
        lambda k: (
            sorted(k.resources[SERIAL].devices) == expected
            and k.resources[SERIAL].healthy == expected
        ),
        timeout=10,
        what=f"exactly {expected} healthy",
    )
    (backend,) = backends
    assert backend.scans < 2 * PAIRS, "events are coalesced, not one scan each"
    grown = usage().grown_since(before)
    assert grown.get("fds", 0) <= 2, f"descriptors grew by {grown} during the storm"


# -- kernel uevents through libudev (umockdev) ---------------------------------------

TTY_PARENT = "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0"
UEVENT_PAIRS = 1_000
UDEV_CONFIG = """
devices:
  - name: serial
    groups:
      - udev: [{subsystem: tty, kernel: "ttyUSB*"}]
"""

Tree = dict[str, dict[str, dict[str, object]]]


def tty_syspath(n: int) -> str:
    return f"/sys{TTY_PARENT}/ttyUSB{n}/tty/ttyUSB{n}"


def tty_record(n: int) -> str:
    return f"""
    P: {TTY_PARENT}/ttyUSB{n}/tty/ttyUSB{n}
    N: ttyUSB{n}
    E: SUBSYSTEM=tty
    E: DEVNAME=/dev/ttyUSB{n}
    A: dev=188:{n}
    """


def healthy(tree: Tree) -> list[str]:
    return sorted(i for i, d in tree.get(SERIAL, {}).items() if d["health"] == "Healthy")


def nodes(tree: Tree, device: str) -> list[str]:
    """The host paths of a device in a harness tree."""
    listed = tree[SERIAL][device]["nodes"]
    assert isinstance(listed, list)
    return sorted(host for host, _, _ in listed)


async def test_a_uevent_storm_ends_in_the_right_state(umockdev_harness: UmockdevHarness) -> None:
    present = [0, 1, 2, 3]
    for n in present:
        await umockdev_harness.add(tty_record(n))
    await umockdev_harness.start(UDEV_CONFIG, udev_source="kernel")
    await umockdev_harness.wait_for_tree(lambda t: len(t[SERIAL]) == 1)

    # 1,000 add/remove uevent pairs; every 100th pair one adapter is really unplugged and
    # a new one plugged in (umockdev takes ~5 ms to build a device, a uevent ~0.2 ms).
    fresh = len(present)
    for i in range(UEVENT_PAIRS):
        n = present[i % len(present)]
        await umockdev_harness.uevent(tty_syspath(n), "add")
        await umockdev_harness.uevent(tty_syspath(n), "remove")
        if i % 100 == 99:
            await umockdev_harness.remove(tty_syspath(present.pop(0)))
            await umockdev_harness.add(tty_record(fresh), uevent=tty_syspath(fresh))
            present.append(fresh)
            fresh += 1

    # Every node one udev group finds is one device: the four present now, together.
    expected = sorted(tty(n) for n in present)
    # (Units seen during the storm stay listed Unhealthy for the grace period.)
    await umockdev_harness.wait_for_tree(
        lambda t: [nodes(t, i) for i in healthy(t)] == [expected], timeout=20
    )
