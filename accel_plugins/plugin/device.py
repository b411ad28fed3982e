"""Devices as the framework sees them: immutable values a backend publishes."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from accel_plugins.plugin.health_reason import HealthReason

_PERMISSION_LETTERS = frozenset("rwm")
_F = TypeVar("_F")
_EMPTY: Mapping[str, str] = MappingProxyType({})


class Health(enum.StrEnum):
    """Device health as the kubelet spells it on the wire."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


def _frozen_map(value: Mapping[str, str]) -> Mapping[str, str]:
    return value if isinstance(value, MappingProxyType) else MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device node handed to the container runtime (a cgroup device rule + bind)."""

    host_path: str
    container_path: str = ""
    permissions: str = "rw"

    def __post_init__(self) -> None:
        if not self.container_path:
            object.__setattr__(self, "container_path", self.host_path)
        if not self.permissions or not set(self.permissions) <= _PERMISSION_LETTERS:
            raise ValueError(
                f"device node {self.host_path!r}: permissions {self.permissions!r} "
                "must be a non-empty combination of 'r', 'w' and 'm'"
            )


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount handed to the container runtime."""

    host_path: str
    container_path: str = ""
    read_only: bool = False

    def __post_init__(self) -> None:
        if not self.container_path:
            object.__setattr__(self, "container_path", self.host_path)


@dataclass(frozen=True, slots=True)
class Device:
    """One allocatable unit of a resource.

    ``facts`` is the backend's own slot: a value of a type the backend declares
    (a frozen dataclass such as a GPU's index and link row, or a config group),
    read back by the backend's own hooks. The framework never looks inside; it
    only compares devices, so the value must compare by content. Mappings are
    frozen on construction so a Device can be shared between the backend
    thread and the servers without copying.
    """

    id: str
    health: Health = Health.HEALTHY
    numa_nodes: tuple[int, ...] = ()
    nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    envs: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    cdi_devices: tuple[str, ...] = ()
    facts: object = field(default=None, hash=False)
    # Why the device is Unhealthy (None while Healthy, or when the backend cannot say).
    reason: HealthReason | None = None

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("device id must not be empty")
        object.__setattr__(self, "health", Health(self.health))
        object.__setattr__(self, "envs", _frozen_map(self.envs))
        object.__setattr__(self, "annotations", _frozen_map(self.annotations))

    @property
    def healthy(self) -> bool:
        return self.health is Health.HEALTHY

    def with_health(self, health: Health, reason: HealthReason | None = None) -> Device:
        """This device with ``health``; a Healthy device carries no reason."""
        health = Health(health)
        if health is Health.HEALTHY:
            reason = None
        if health is self.health and reason == self.reason:
            return self
        return replace(self, health=health, reason=reason)

    def facts_as(self, kind: type[_F]) -> _F:
        """The backend's facts, checked to be of the type it declared.

        Raises TypeError when the device carries no facts of that type (a
        device from another backend, or built without them).
        """
        if not isinstance(self.facts, kind):
            raise TypeError(
                f"device {self.id!r}: facts are {type(self.facts).__name__}, not {kind.__name__}"
            )
        return self.facts


# resource name -> device id -> Device. A complete picture of one moment; the
# manager diffs consecutive trees, so backends never send deltas.
DeviceTree = Mapping[str, Mapping[str, Device]]


def tree(
    resources: Mapping[str, list[Device] | tuple[Device, ...]],
) -> dict[str, dict[str, Device]]:
    """Build a DeviceTree from lists, refusing duplicate IDs within a resource."""
    out: dict[str, dict[str, Device]] = {}
    for resource, devices in resources.items():
        by_id: dict[str, Device] = {}
        for device in devices:
            if device.id in by_id:
                raise ValueError(f"resource {resource!r}: duplicate device id {device.id!r}")
            by_id[device.id] = device
        out[resource] = by_id
    return out


@dataclass(frozen=True, slots=True)
class ContainerAllocation:
    """What one container gets for its devices; becomes a ContainerAllocateResponse."""

    nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    envs: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY, hash=False)
    cdi_devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "envs", _frozen_map(self.envs))
        object.__setattr__(self, "annotations", _frozen_map(self.annotations))
