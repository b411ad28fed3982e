"""The FPGA backend end to end: a fake host, the real framework, the kubelet emulator.

Only the accel_plugins.testing fixtures are used: ``accel_host`` (a fake /dev and
/sys), ``accel_serve`` (the backend run by the framework's Manager and seen
through the emulated kubelet).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from accel_plugins.kubelet import DeviceSpec
from accel_plugins.plugin import ConfigError
from accel_plugins.testing import FakeHost, ServeBackend, ServedBackend, command_factory

from accel_fpga.command import COMMAND

RESOURCE = "example.com/fpga"


def add_card(host: FakeHost, index: int, *, numa: int = 0, errors: str = "0") -> None:
    """An FPGA card: its PCI function, /dev/fpgaN and /sys/class/fpga/fpgaN."""
    pci = host.pci_device(f"0000:{0x3B + index:02x}:00.0", numa_node=numa)
    dev = host.node(f"/dev/fpga{index}", major=240, minor=index)
    host.class_device("fpga", f"fpga{index}", parent=pci, dev=dev, attributes={"errors": errors})


async def serve(host: FakeHost, accel_serve: ServeBackend) -> ServedBackend:
    """The backend as ``accel-plugins fpga --dev-root ... --sys-root ...`` builds it."""
    options = {"dev_root": host.dev, "sys_root": host.sys, "poll_interval": 0.02}
    return await accel_serve(command_factory(COMMAND, options))


async def test_discovers_cards_with_their_numa_node(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    add_card(accel_host, 0, numa=0)
    add_card(accel_host, 1, numa=1)
    add_card(accel_host, 2, numa=-1)  # no particular node
    accel_host.regular_file("/dev/fpga-manager")  # not a card: the name does not match

    served = await serve(accel_host, accel_serve)
    view = await served.wait_for_devices(RESOURCE, 3, healthy=3)

    assert {i: d.numa_nodes for i, d in view.devices.items()} == {
        "fpga0": (0,),
        "fpga1": (1,),
        "fpga2": (),
    }


async def test_allocate_hands_the_device_node_to_the_container(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    add_card(accel_host, 0)
    add_card(accel_host, 1)
    served = await serve(accel_host, accel_serve)
    await served.wait_for_devices(RESOURCE, 2, healthy=2)

    record = await served.allocate(RESOURCE, ids=["fpga1"])

    assert record.device_ids == ("fpga1",)
    # The host's path, not the fake root's: the runtime resolves it on the node.
    assert record.response.devices == (DeviceSpec("/dev/fpga1", "/dev/fpga1", "rw"),)
    other = await served.allocate(RESOURCE, 1)
    assert other.device_ids == ("fpga0",)


async def test_a_card_reporting_errors_is_unhealthy_until_cleared(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    add_card(accel_host, 0)
    add_card(accel_host, 1, errors="3")
    served = await serve(accel_host, accel_serve)
    await served.wait_for_devices(RESOURCE, 2, healthy=1)
    assert served.devices(RESOURCE).unhealthy == ["fpga1"]

    accel_host.write("/sys/class/fpga/fpga0/errors", "1")
    await served.wait_for_health(RESOURCE, "fpga0", "Unhealthy")
    accel_host.write("/sys/class/fpga/fpga1/errors", "0")
    await served.wait_for_health(RESOURCE, "fpga1", "Healthy")


async def test_hotplug(accel_host: FakeHost, accel_serve: ServeBackend) -> None:
    add_card(accel_host, 0)
    served = await serve(accel_host, accel_serve)
    await served.wait_for_devices(RESOURCE, 1)

    add_card(accel_host, 1)
    await served.wait_for_devices(RESOURCE, 2, healthy=2)

    accel_host.remove("/dev/fpga0")
    accel_host.remove("/sys/class/fpga/fpga0")
    view = await served.wait_for_devices(RESOURCE, 1)
    assert list(view.devices) == ["fpga1"]


def test_a_missing_root_is_a_configuration_error(accel_host: FakeHost) -> None:
    with pytest.raises(ConfigError, match="--sys-root"):
        command_factory(COMMAND, {"dev_root": accel_host.dev, "sys_root": Path("/nonexistent")})


def test_the_poll_interval_must_be_positive() -> None:
    [interval] = [o for o in COMMAND.options if o.flag == "--poll-interval"]
    assert interval.type("0.5") == 0.5
    with pytest.raises(ValueError, match="positive"):
        interval.type("0")
