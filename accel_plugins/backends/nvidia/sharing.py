"""Sharing: each shared device is offered as ``replicas`` devices ``<id>::<n>``.

Time-slicing and MPS replicate devices the same way; :func:`apply_sharing`
takes both sections, so one GPU can never be in both (the second entry that
selects it is a ConfigError). MPS adds what NVIDIA's plugin refuses: MIG
devices (``internal/plugin/mps.go``), and (ours, as we honour ``devices`` and
``rename``) a resource that would hold MPS replicas beside other devices, since
the MPS contract is given per resource (one control daemon, one pipe directory).

Replicas of one device go under the entry's ``rename`` (``<name>.shared``
with ``renameByDefault``, else the original name); the resource's devices
that no entry selects stay under the original name, unreplicated. Several
entries for one resource with disjoint device lists give each GPU its own
replica count. A replica carries its device's facts plus ``replica`` (n)
and ``replica_of`` (the shared device's ID), and shares its health.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from accel_plugins.backends.nvidia.config.settings import ReplicatedResource, TimeSlicing
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


@dataclass(frozen=True, slots=True)
class Shared:
    """Resources after sharing, and which of them hold MPS replicas."""

    resources: dict[str, list[Device]]
    mps: frozenset[str] = field(default_factory=frozenset)


def apply_time_slicing(
    resources: Mapping[str, Sequence[Device]], sharing: TimeSlicing, *, source: str = "config"
) -> dict[str, list[Device]]:
    """Replace shared devices by their replicas; ConfigError names the entry at fault."""
    return apply_sharing(resources, sharing, None, source=source).resources


def apply_sharing(
    resources: Mapping[str, Sequence[Device]],
    time_slicing: TimeSlicing,
    mps: TimeSlicing | None,
    *,
    source: str = "config",
) -> Shared:
    """Replicate what either section shares; a device selected twice is a ConfigError."""
    entries = [*time_slicing.resources, *(mps.resources if mps else ())]
    mps_entries = {id(e) for e in (mps.resources if mps else ())}
    out: dict[str, list[Device]] = {}
    mps_ids: set[str] = set()
    mps_names: dict[str, ReplicatedResource] = {}
    shared_names = {e.name for e in entries}
    for name, devices in resources.items():
        if name not in shared_names:
            out.setdefault(name, []).extend(devices)
            continue
        taken: dict[str, str] = {}
        replicas: list[tuple[str, Device]] = []
        for entry in (e for e in entries if e.name == name):
            for device in _select(entry, devices, set(taken), source):
                if device.id in taken:
                    raise ConfigError(
                        source,
                        f"{entry.where}.devices",
                        f"device {gpu_facts(device).index} is already shared by {taken[device.id]}",
                    )
                taken[device.id] = entry.where
                copies = replicate(device, entry.replicas)
                if id(entry) in mps_entries:
                    _check_mps_device(entry, device, source)
                    mps_ids.update(r.id for r in copies)
                    mps_names.setdefault(entry.rename, entry)
                replicas.extend((entry.rename, r) for r in copies)
        kept = [d for d in devices if d.id not in taken]
        if kept:
            out.setdefault(name, []).extend(kept)
        for rename, replica in replicas:
            out.setdefault(rename, []).append(replica)
    for name, entry in mps_names.items():
        others = [d for d in out[name] if d.id not in mps_ids]
        if others:
            raise ConfigError(
                source,
                f"{entry.where}.rename",
                f"{name} would hold MPS replicas beside {len(others)} other device(s) "
                f"({others[0].id}); give the MPS replicas a name of their own (rename) "
                "or share every device of the resource",
            )
    return Shared(out, frozenset(mps_names))


def _check_mps_device(entry: ReplicatedResource, device: Device, source: str) -> None:
    facts = gpu_facts(device)
    if facts.kind == "mig":
        # NVIDIA's plugin refuses to serve such a resource (internal/plugin/mps.go).
        raise ConfigError(
            source,
            f"{entry.where}.devices",
            f"MIG device {facts.index} cannot be shared with MPS (NVIDIA's plugin refuses "
            "MPS for MIG devices too); share whole GPUs, or time-slice MIG devices",
        )
