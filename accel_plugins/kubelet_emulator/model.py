"""Typed, immutable views of the device plugin messages the kubelet side handles.

The emulator, the checkpoint and ``inspect`` work on these values instead of
protobuf messages so that callers get real types and equality, and so that a
record can be shared without anyone mutating it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


def _empty() -> Mapping[str, str]:
    return MappingProxyType({})


def _frozen(value: Mapping[str, str]) -> Mapping[str, str]:
    return value if isinstance(value, MappingProxyType) else MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """``DevicePluginOptions``: which optional calls the kubelet must or may make."""

    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False

    @classmethod
    def from_proto(cls, msg: pb.DevicePluginOptions) -> PluginOptions:
        return cls(
            pre_start_required=msg.pre_start_required,
            get_preferred_allocation_available=msg.get_preferred_allocation_available,
        )

    def to_proto(self) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=self.pre_start_required,
            get_preferred_allocation_available=self.get_preferred_allocation_available,
        )

    def to_dict(self) -> dict[str, bool]:
        return {
            "pre_start_required": self.pre_start_required,
            "get_preferred_allocation_available": self.get_preferred_allocation_available,
        }


@dataclass(frozen=True, slots=True)
class DeviceState:
    """One device as a plugin reported it in ListAndWatch."""

    id: str
    health: str = HEALTHY
    numa_nodes: tuple[int, ...] = ()

    @property
    def healthy(self) -> bool:
        # Anything but the exact wire value counts as unhealthy, as in the kubelet.
        return self.health == HEALTHY

    @classmethod
    def from_proto(cls, msg: pb.Device) -> DeviceState:
        nodes = tuple(node.ID for node in msg.topology.nodes) if msg.HasField("topology") else ()
        return cls(id=msg.ID, health=msg.health, numa_nodes=nodes)

    def to_proto(self) -> pb.Device:
        device = pb.Device(ID=self.id, health=self.health)
        if self.numa_nodes:
            device.topology.nodes.extend(pb.NUMANode(ID=n) for n in self.numa_nodes)
        return device

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "health": self.health, "numa_nodes": list(self.numa_nodes)}


@dataclass(frozen=True, slots=True)
class MountSpec:
    """A bind mount from an Allocate response."""

    container_path: str
    host_path: str
    read_only: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "container_path": self.container_path,
            "host_path": self.host_path,
            "read_only": self.read_only,
        }


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A device node from an Allocate response."""

    container_path: str
    host_path: str
    permissions: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "container_path": self.container_path,
            "host_path": self.host_path,
            "permissions": self.permissions,
        }


@dataclass(frozen=True, slots=True)
class ContainerResponse:
    """``ContainerAllocateResponse``: what the runtime must set up for one container."""

    envs: Mapping[str, str] = field(default_factory=_empty, hash=False)
    mounts: tuple[MountSpec, ...] = ()
    devices: tuple[DeviceSpec, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=_empty, hash=False)
    cdi_devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "envs", _frozen(self.envs))
        object.__setattr__(self, "annotations", _frozen(self.annotations))

    @classmethod
    def from_proto(cls, msg: pb.ContainerAllocateResponse) -> ContainerResponse:
        return cls(
            envs=dict(msg.envs),
            mounts=tuple(MountSpec(m.container_path, m.host_path, m.read_only) for m in msg.mounts),
            devices=tuple(
                DeviceSpec(d.container_path, d.host_path, d.permissions) for d in msg.devices
            ),
            annotations=dict(msg.annotations),
            cdi_devices=tuple(c.name for c in msg.cdi_devices),
        )

    def to_proto(self) -> pb.ContainerAllocateResponse:
        return pb.ContainerAllocateResponse(
            envs=dict(self.envs),
            mounts=[
                pb.Mount(
                    container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
                )
                for m in self.mounts
            ],
            devices=[
                pb.DeviceSpec(
                    container_path=d.container_path,
                    host_path=d.host_path,
                    permissions=d.permissions,
                )
                for d in self.devices
            ],
            annotations=dict(self.annotations),
            cdi_devices=[pb.CDIDevice(name=name) for name in self.cdi_devices],
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "envs": dict(sorted(self.envs.items())),
            "mounts": [m.to_dict() for m in self.mounts],
            "devices": [d.to_dict() for d in self.devices],
            "annotations": dict(sorted(self.annotations.items())),
            "cdi_devices": list(self.cdi_devices),
        }
