"""Vanished devices: kept Unhealthy while they may be held, dropped when free, back when found."""

from __future__ import annotations

from collections.abc import Collection

from accel_plugins.backends.generic.health import VanishedDevices
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
