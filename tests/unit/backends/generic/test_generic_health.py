"""Vanished devices: kept Unhealthy while they may be held, dropped when free, back when found."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

import pytest

from accel_plugins.backends.generic.config import PathType
from accel_plugins.backends.generic.health import VanishedDevices, path_problem
from accel_plugins.backends.generic.hostfs import HostPaths
from accel_plugins.plugin.device import Device, DeviceNode, Health

R = "accel-plugins.io/serial"
A = Device("a", nodes=(DeviceNode("/dev/ttyUSB0"),))
B = Device("b", nodes=(DeviceNode("/dev/ttyUSB1"),))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def health(tree: dict[str, dict[str, Device]]) -> dict[str, str]:
    return {i: d.health.value for i, d in tree[R].items()}


def test_a_vanished_device_stays_unhealthy_within_the_grace_period() -> None:
    clock = Clock()
    keeper = VanishedDevices(grace=60, clock=clock)
    assert health(keeper.apply({R: {"a": A, "b": B}})) == {"a": "Healthy", "b": "Healthy"}

    clock.now += 10
    kept = keeper.apply({R: {"a": A}})
    assert health(kept) == {"a": "Healthy", "b": "Unhealthy"}
    assert kept[R]["b"].nodes == B.nodes  # the same spec, only the health differs

    clock.now += 59
    assert health(keeper.apply({R: {"a": A}})) == {"a": "Healthy", "b": "Unhealthy"}
    clock.now += 1  # 60 s after it vanished
    assert health(keeper.apply({R: {"a": A}})) == {"a": "Healthy"}


def test_a_returning_device_is_healthy_again_and_its_grace_restarts() -> None:
    clock = Clock()
    keeper = VanishedDevices(grace=60, clock=clock)
    keeper.apply({R: {"a": A, "b": B}})
    keeper.apply({R: {"a": A}})
    clock.now += 50
    assert health(keeper.apply({R: {"a": A, "b": B}})) == {"a": "Healthy", "b": "Healthy"}
    clock.now += 1
    keeper.apply({R: {"a": A}})
    clock.now += 59
    assert health(keeper.apply({R: {"a": A}})) == {"a": "Healthy", "b": "Unhealthy"}


def test_with_an_allocation_feed_only_held_devices_are_kept() -> None:
    held: dict[str, set[str]] = {R: {"b"}}

    def in_use(resource: str) -> Collection[str]:
        return held.get(resource, set())

    keeper = VanishedDevices(grace=0, in_use=in_use)
    keeper.apply({R: {"a": A, "b": B}})
    assert health(keeper.apply({R: {}})) == {"b": "Unhealthy"}
    held[R] = set()  # the pod let go
    assert health(keeper.apply({R: {}})) == {}


def test_an_unhealthy_device_that_is_still_found_is_not_touched() -> None:
    keeper = VanishedDevices(grace=60)
    sick = A.with_health(Health.UNHEALTHY)
    assert keeper.apply({R: {"a": sick}}) == {R: {"a": sick}}


def test_a_vanished_device_says_which_nodes_are_gone() -> None:
    keeper = VanishedDevices(grace=60, clock=Clock())
    keeper.apply({R: {"a": A, "b": B}})
    reason = keeper.apply({R: {"a": A}})[R]["b"].reason
    assert reason is not None
    assert (reason.kind, reason.detail) == ("node-vanished", "/dev/ttyUSB1 no longer found")


@pytest.mark.parametrize(
    ("make", "kind", "problem"),
    [
        pytest.param(None, PathType.DEVICE, "node-vanished: /dev/card is gone", id="gone"),
        pytest.param(
            "file", PathType.DEVICE, "unreadable: /dev/card is not a device node", id="file"
        ),
        pytest.param("file", PathType.MOUNT, None, id="a-file-is-a-fine-mount"),
        pytest.param("dir", PathType.DEVICE, None, id="a-directory-of-nodes"),
        pytest.param(
            "fifo", PathType.DEVICE, "unreadable: /dev/card is not a device node", id="fifo"
        ),
    ],
)
def test_path_problem(
    tmp_path: Path, make: str | None, kind: PathType, problem: str | None
) -> None:
    local = tmp_path / "card"
    if make == "file":
        local.write_text("")
    elif make == "dir":
        local.mkdir()
    elif make == "fifo":
        os.mkfifo(local)
    found = path_problem(HostPaths(tmp_path, tmp_path / "sys"), "/dev/card", kind)
    assert (str(found) if found else None) == problem
