"""What the emulated kubelet knows about each resource, and the read-only view of it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from accel_plugins.kubelet_emulator.endpoint import Endpoint
from accel_plugins.kubelet_emulator.model import UNHEALTHY, DeviceState, PluginOptions

_LISTED = 4


def _some(items: Sequence[str]) -> str:
    """The first few items and how many more, so one event stays one readable line."""
    shown = ", ".join(items[:_LISTED])
    return shown if len(items) <= _LISTED else f"{shown} and {len(items) - _LISTED} more"


@dataclass(frozen=True, slots=True)
class ResourceView:
    """A snapshot of one resource as the kubelet sees it.

    ``devices`` maps id to the device as last reported; while the plugin is
    disconnected every device reads Unhealthy, so ``allocatable`` is 0 but
    ``capacity`` still counts them (the kubelet's grace period).
    """

    name: str
    options: PluginOptions
    connected: bool
    devices: Mapping[str, DeviceState] = field(hash=False)
    updates: int

    @property
    def healthy(self) -> list[str]:
        return sorted(i for i, d in self.devices.items() if d.healthy)

    @property
    def unhealthy(self) -> list[str]:
        return sorted(i for i, d in self.devices.items() if not d.healthy)

    @property
    def capacity(self) -> int:
        return len(self.devices)

    @property
    def allocatable(self) -> int:
        return len(self.healthy)

    def summary(self) -> str:
        state = "connected" if self.connected else "disconnected"
        return (
            f"{self.name}: {state}, {self.capacity} devices "
            f"({self.allocatable} healthy, {len(self.unhealthy)} unhealthy), "
            f"{self.updates} updates"
        )


@dataclass(slots=True)
class ResourceState:
    """The kubelet's mutable record of a resource; only the emulator touches it."""

    name: str
    options: PluginOptions
    endpoint: Endpoint | None = None
    connected: bool = False
    devices: dict[str, DeviceState] = field(default_factory=dict)
    updates: int = 0

    def view(self) -> ResourceView:
        return ResourceView(
            name=self.name,
            options=self.options,
            connected=self.connected,
            devices=MappingProxyType(dict(self.devices)),
            updates=self.updates,
        )

    def replace_devices(self, devices: Sequence[DeviceState]) -> str:
        """Take a complete ListAndWatch list; return a one-line description of the change."""
        new = {d.id: d for d in devices}
        added = sorted(new.keys() - self.devices.keys())
        removed = sorted(self.devices.keys() - new.keys())
        changed = sorted(
            i for i in new.keys() & self.devices.keys() if new[i].health != self.devices[i].health
        )
        self.devices = new
        self.updates += 1
        parts = [f"{len(new)} devices ({sum(d.healthy for d in new.values())} healthy)"]
        if added:
            parts.append("added " + _some(added))
        if removed:
            parts.append("removed " + _some(removed))
        if changed:
            parts.append("health " + _some([f"{i}={new[i].health}" for i in changed]))
        return "; ".join(parts)

    def disconnect(self) -> None:
        """The stream ended: keep the devices but none of them is usable."""
        self.connected = False
        self.endpoint = None
        self.devices = {i: replace(d, health=UNHEALTHY) for i, d in self.devices.items()}
