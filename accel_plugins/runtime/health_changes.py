"""The one place device health changes are seen: successive trees in, transitions out.

Both the device-plugin manager and the DRA driver hand every tree they serve
to a :class:`HealthWatch`; it compares each device's health and reason with
the previous tree's and tells its sinks (Node Events, for one) what changed.
The trees themselves stay the source of truth for the channels read at any
time (ListAndWatch, the DRA health stream, ``/metrics``): every channel sees
the same health and the same :class:`~accel_plugins.plugin.health_reason.HealthReason`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from accel_plugins.plugin.device import Device, DeviceTree, Health
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind

log = logging.getLogger(__name__)

# What the framework says when nobody watches the hardware (the backend crashed
# or is being rebuilt): the devices may be fine, but nobody can promise it.
BACKEND_DOWN = HealthReason(ReasonKind.UNMONITORED, "the backend is not running")


def all_unhealthy(
    devices: Mapping[str, Device], reason: HealthReason = BACKEND_DOWN
) -> dict[str, Device]:
    """The same devices, all Unhealthy; a device that already has a reason keeps it."""
    return {
        i: d.with_health(Health.UNHEALTHY, d.reason if d.reason is not None else reason)
        for i, d in devices.items()
    }


@dataclass(frozen=True, slots=True)
class HealthChange:
    """A device turned Unhealthy (or got another reason), or turned Healthy again."""

    resource: str
    device: str
    healthy: bool
    reason: HealthReason | None = None


class HealthSink(Protocol):
    """Told about each batch of changes, on the event loop; must not block."""

    def health_changed(self, changes: Sequence[HealthChange]) -> None: ...


def health_changes(old: DeviceTree | None, new: DeviceTree) -> list[HealthChange]:
    """What changed from ``old`` to ``new``, in resource and device order.

    A device new in ``new`` counts only when it arrives Unhealthy (a device
    known Healthy from the start is no news); a device gone from ``new`` is
    not a health change (the backend no longer offers it).
    """
    changes: list[HealthChange] = []
    before = old or {}
    for resource in sorted(new):
        was = before.get(resource, {})
        for device_id in sorted(new[resource]):
            device = new[resource][device_id]
            prior = was.get(device_id)
            if prior is None:
                if device.healthy:
                    continue
            elif prior.health is device.health and prior.reason == device.reason:
                continue
            changes.append(HealthChange(resource, device_id, device.healthy, device.reason))
    return changes


class HealthWatch:
    """Remembers the last tree and tells every sink how the next one differs."""

    def __init__(self, sinks: Sequence[HealthSink] = ()) -> None:
        self._sinks = list(sinks)
        self._last: DeviceTree | None = None

    def add_sink(self, sink: HealthSink) -> None:
        """Tell ``sink`` about every later change, and now about the devices already
        Unhealthy (a sink that starts late still hears of them)."""
        self._sinks.append(sink)
        if self._last is not None and (now := health_changes(None, self._last)):
            sink.health_changed(now)

    def remove_sink(self, sink: HealthSink) -> None:
        if sink in self._sinks:
            self._sinks.remove(sink)

    def observe(self, tree: DeviceTree) -> list[HealthChange]:
        """Take the tree now served; the changes (also given to each sink)."""
        if tree is self._last:
            return []
        changes = health_changes(self._last, tree)
        self._last = tree
        if changes:
            for sink in self._sinks:
                try:
                    sink.health_changed(changes)
                except Exception:
                    # A sink's bug must not stop the trees reaching the kubelet.
                    log.exception("health sink %r failed", sink)
        return changes
