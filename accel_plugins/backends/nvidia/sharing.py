"""Time-slicing: each shared device is offered as ``replicas`` devices ``<id>::<n>``.

Replicas of one device go under the entry's ``rename`` (``<name>.shared``
with ``renameByDefault``, else the original name); the resource's devices
that no entry selects stay under the original name, unreplicated. Several
entries for one resource with disjoint device lists give each GPU its own
replica count. A replica carries its device's facts plus ``replica`` (n)
and ``replica_of`` (the shared device's ID), and shares its health.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from accel_plugins.backends.nvidia.config import ReplicatedResource, TimeSlicing
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.device import Device

SEPARATOR = "::"


def replica_id(device_id: str, n: int) -> str:
    return f"{device_id}{SEPARATOR}{n}"


def base_id(device_id: str) -> str:
    """``GPU-x::3`` -> ``GPU-x``; other IDs are returned as they are."""
    return device_id.split(SEPARATOR, 1)[0]


def is_replica(device: Device) -> bool:
    return gpu_facts(device).is_replica


def replicate(device: Device, count: int) -> list[Device]:
    return [
        Device(
            id=replica_id(device.id, n),
            health=device.health,
            numa_nodes=device.numa_nodes,
            nodes=device.nodes,
            facts=gpu_facts(device).as_replica(n, device.id),
        )
        for n in range(count)
    ]


def _matches(device: Device, ref: str) -> bool:
    facts = gpu_facts(device)
    return ref in (device.id, facts.index, facts.uuid)


def _select(
    entry: ReplicatedResource, devices: Sequence[Device], taken: set[str], source: str
) -> list[Device]:
    spec = entry.devices
    if spec.all:
        return [d for d in devices if d.id not in taken]
    if spec.count:
        if spec.count > len(devices):
            raise ConfigError(
                source,
                f"{entry.where}.devices",
                f"asks to share {spec.count} devices of {entry.name}, the node has {len(devices)}",
            )
        return list(devices[: spec.count])
    chosen: list[Device] = []
    for i, ref in enumerate(spec.refs):
        found = [d for d in devices if _matches(d, ref)]
        if not found:
            raise ConfigError(
                source, f"{entry.where}.devices[{i}]", f"no {entry.name} device matches {ref!r}"
            )
        chosen.extend(d for d in found if d not in chosen)
    return chosen


def unmatched(
    resources: Mapping[str, Sequence[Device]], sharing: TimeSlicing
) -> list[ReplicatedResource]:
    """Entries naming a resource the node does not have (valid names, as NVIDIA accepts them)."""
    return [entry for entry in sharing.resources if entry.name not in resources]


def apply_time_slicing(
    resources: Mapping[str, Sequence[Device]], sharing: TimeSlicing, *, source: str = "config"
) -> dict[str, list[Device]]:
    """Replace shared devices by their replicas; ConfigError names the entry at fault."""
    out: dict[str, list[Device]] = {}
    shared_names = {e.name for e in sharing.resources}
    for name, devices in resources.items():
        if name not in shared_names:
            out.setdefault(name, []).extend(devices)
            continue
        taken: dict[str, str] = {}
        replicas: list[tuple[str, Device]] = []
        for entry in (e for e in sharing.resources if e.name == name):
            for device in _select(entry, devices, set(taken), source):
                if device.id in taken:
                    raise ConfigError(
                        source,
                        f"{entry.where}.devices",
                        f"device {gpu_facts(device).index} is already shared by {taken[device.id]}",
                    )
                taken[device.id] = entry.where
                replicas.extend((entry.rename, r) for r in replicate(device, entry.replicas))
        kept = [d for d in devices if d.id not in taken]
        if kept:
            out.setdefault(name, []).extend(kept)
        for rename, replica in replicas:
            out.setdefault(rename, []).append(replica)
    return out
