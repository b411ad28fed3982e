"""Default allocation: request validation, spec merging and the NUMA policy.

Pure functions over Device values so that backends can reuse them inside
their own Allocator/PreferredAllocator and tests need no sockets.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any

from accel_plugins.errors import AllocationError
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceNode, Mount
from accel_plugins.plugin.health_reason import ReasonKind

log = logging.getLogger(__name__)

# Enumerating NUMA node subsets is exact and cheap for real machines (<= 8
# nodes); beyond this we fall back to taking the largest nodes first.
_MAX_EXACT_NUMA_NODES = 16
_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort "dev2" before "dev10" so answers look the way operators expect."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part
    )


_SHOWN_IDS = 8
_SHOWN_ID_CHARS = 64
_SHOWN_REASON_CHARS = 256


def _describe(ids: Iterable[str]) -> str:
    """The first few IDs, each cut short, and how many more.

    Error messages travel in a gRPC trailer, and clients drop trailers over 8 KiB:
    listing 5,000 bad IDs turned the refusal into RESOURCE_EXHAUSTED with no reason.
    """
    items = list(ids)
    shown = ", ".join(
        repr(i) if len(i) <= _SHOWN_ID_CHARS else repr(i[:_SHOWN_ID_CHARS]) + "..."
        for i in items[:_SHOWN_IDS]
    )
    more = len(items) - _SHOWN_IDS
    return f"{shown} and {more} more" if more > 0 else shown


def resolve(
    resource: str, ids: Sequence[str], known: Mapping[str, Device], *, require_healthy: bool
) -> list[Device]:
    """Map requested IDs to devices, naming every unknown, unhealthy or repeated one."""
    if not ids:
        raise AllocationError(f"resource {resource}: the request names no devices")
    if len(ids) == 1:  # the common request: nothing to repeat
        device = known.get(ids[0])
        if device is not None and (device.healthy or not require_healthy):
            return [device]
    seen: set[str] = set()
    duplicates: list[str] = []
    unknown: list[str] = []
    unhealthy: list[str] = []
    cordoned: list[str] = []
    cordon_text = ""
    devices: list[Device] = []
    for device_id in ids:
        if device_id in seen:
            if device_id not in duplicates:
                duplicates.append(device_id)
            continue
        seen.add(device_id)
        device = known.get(device_id)
        if device is None:
            unknown.append(device_id)
        elif require_healthy and not device.healthy:
            # A cordon is an operator's decision, not a fault: say so, with their words.
            if device.reason is not None and device.reason.kind is ReasonKind.CORDONED:
                cordoned.append(device_id)
                cordon_text = cordon_text or device.reason.detail
            else:
                unhealthy.append(device_id)
        else:
            devices.append(device)
    problems = []
    if unknown:
        problems.append(f"unknown device IDs {_describe(unknown)}")
    if unhealthy:
        problems.append(f"unhealthy device IDs {_describe(unhealthy)}")
    if cordoned:
        why = f" ({cordon_text[:_SHOWN_REASON_CHARS]})" if cordon_text else ""
        problems.append(f"cordoned device IDs {_describe(cordoned)}{why}")
    if duplicates:
        problems.append(f"duplicate device IDs {_describe(duplicates)}")
    if problems:
        raise AllocationError(f"resource {resource}: " + "; ".join(problems))
    return devices


def merge(devices: Sequence[Device]) -> ContainerAllocation:
    """Combine the container-facing specs of several devices into one response.

    Nodes and mounts are keyed by container path: two devices sharing a node
    (e.g. a control device) yield it once, with the union of permissions.
    Env vars and annotations are merged in device order; later devices win. Two
    devices setting one variable to different values is logged as a warning (the
    backend meant a list, which only an ``allocate`` hook can build).
    A device that names CDI devices is injected by them: its nodes, mounts and
    env are in its CDI spec (``accel_plugins.plugin.cdi``), so only its CDI
    names (and annotations, which a spec cannot carry) go into the response;
    the runtime would otherwise create its nodes twice.
    """
    if len(devices) == 1:  # the common request: nothing to merge unless paths repeat
        only = devices[0]
        if not only.cdi_devices and len(only.nodes) <= 1 and len(only.mounts) <= 1:
            return ContainerAllocation(only.nodes, only.mounts, only.envs, only.annotations)
    nodes: dict[str, DeviceNode] = {}
    mounts: dict[str, Mount] = {}
    envs: dict[str, str] = {}
    annotations: dict[str, str] = {}
    cdi: dict[str, None] = {}
    for device in devices:
        if device.annotations:  # most devices have none; updating from a proxy is slow
            annotations.update(device.annotations)
        if device.cdi_devices:
            cdi.update(dict.fromkeys(device.cdi_devices))
            continue
        for node in device.nodes:
            old = nodes.get(node.container_path)
            if old is None:
                nodes[node.container_path] = node
            elif old != node:
                perms = "".join(p for p in "rwm" if p in old.permissions + node.permissions)
                nodes[node.container_path] = DeviceNode(old.host_path, old.container_path, perms)
        for mount in device.mounts:
            mounts.setdefault(mount.container_path, mount)
        if device.envs:
            if envs:
                _warn_env_conflicts(envs, device)
            envs.update(device.envs)
    return ContainerAllocation(
        nodes=tuple(nodes.values()),
        mounts=tuple(mounts.values()),
        envs=envs,
        annotations=annotations,
        cdi_devices=tuple(cdi),
    )


def _warn_env_conflicts(envs: Mapping[str, str], device: Device) -> None:
    for name, value in device.envs.items():
        earlier = envs.get(name)
        if earlier is not None and earlier != value:
            log.warning(
                "env %s: the devices of one request set it to %r and %r; the last device's "
                "(%s) wins. An Allocator (allocate hook) can combine the values instead",
                name,
                earlier,
                value,
                device.id,
            )


def check_preferred_request(
    resource: str, available: Sequence[Device], must_include: Sequence[Device], size: int
) -> None:
    """Reject requests no policy can satisfy, with a message naming the problem."""
    if size <= 0:
        raise AllocationError(f"resource {resource}: allocation_size must be positive, got {size}")
    if size > len(available):
        raise AllocationError(
            f"resource {resource}: allocation_size {size} is larger than the "
            f"{len(available)} available devices"
        )
    if len(must_include) > size:
        raise AllocationError(
            f"resource {resource}: {len(must_include)} must-include devices do not fit in "
            f"allocation_size {size}"
        )
    available_ids = {d.id for d in available}
    missing = [d.id for d in must_include if d.id not in available_ids]
    if missing:
        raise AllocationError(
            f"resource {resource}: must-include device IDs {_describe(missing)} are not available"
        )


def by_natural_id(device: Device) -> tuple[tuple[int, int | str], ...]:
    return natural_key(device.id)


def prefer_fewest_numa_nodes(
    available: Sequence[Device],
    must_include: Sequence[Device],
    size: int,
    *,
    group_of: Callable[[Device], Hashable] | None = None,
    order: Callable[[Device], Any] = by_natural_id,
) -> list[str]:
    """Pick ``size`` devices spanning as few NUMA nodes as possible.

    Must-include devices are always taken and the NUMA nodes they sit on are
    free to use. Among node sets of the smallest size that hold enough
    devices, the lowest node IDs win; devices without NUMA affinity are used
    last. With ``group_of``, devices inside the chosen nodes come from as few
    groups as possible and groups stay whole (see :func:`_take_from_groups`).
    Devices are taken in ``order`` (natural ID order by default) and the
    answer is in natural ID order, so it is deterministic for a given input.
    """
    chosen = {d.id: d for d in must_include}
    need = size - len(chosen)
    if need <= 0:
        return sorted(chosen, key=natural_key)
    candidates = sorted((d for d in available if d.id not in chosen and d.healthy), key=order)
    if len(candidates) < need:  # unhealthy ones only as a last resort
        candidates += sorted(
            (d for d in available if d.id not in chosen and not d.healthy), key=order
        )
    base_nodes = frozenset(n for d in chosen.values() for n in d.numa_nodes)
    with_numa = [d for d in candidates if d.numa_nodes]
    without_numa = [d for d in candidates if not d.numa_nodes]
    open_groups = {group_of(d) for d in chosen.values()} if group_of else set()
    for pool in (_within_fewest_nodes(with_numa, base_nodes, need), without_numa):
        if need <= 0:
            break
        if group_of is None:
            picked = pool[:need]
        else:
            picked = _take_from_groups(pool, need, group_of, open_groups)
        for d in picked:
            chosen[d.id] = d
        need -= len(picked)
    return sorted(chosen, key=natural_key)


def _within_fewest_nodes(devices: list[Device], base: frozenset[int], need: int) -> list[Device]:
    """The devices of the smallest set of NUMA nodes beyond ``base`` holding ``need`` of them.

    Devices on nodes already in use come first; otherwise the input order holds.
    """
    extra_nodes = sorted({n for d in devices for n in d.numa_nodes} - base)

    def order(d: Device) -> tuple[bool, tuple[int, ...]]:
        return (not set(d.numa_nodes) <= base, d.numa_nodes)

    if len(extra_nodes) > _MAX_EXACT_NUMA_NODES:
        return sorted(devices, key=order)
    for count in range(len(extra_nodes) + 1):
        for combo in itertools.combinations(extra_nodes, count):
            nodes = base.union(combo)
            inside = [d for d in devices if nodes.issuperset(d.numa_nodes)]
            if len(inside) >= need:
                return sorted(inside, key=order)
    return sorted(devices, key=order)


def _take_from_groups(
    pool: list[Device],
    need: int,
    group_of: Callable[[Device], Hashable],
    open_groups: set[Hashable],
) -> list[Device]:
    """Up to ``need`` devices from ``pool`` touching as few whole groups as possible.

    Groups already opened (by must-include devices) are used first, since they
    are split anyway. Then, while no single group can hold the rest, the
    largest group is taken whole; the last one is the smallest group that
    holds the rest (best fit), which leaves the bigger groups whole for
    later pods. Ties go to the group met first in ``pool`` order.
    """
    groups: dict[Hashable, list[Device]] = {}
    for d in pool:
        groups.setdefault(group_of(d), []).append(d)
    picked = [d for key in groups if key in open_groups for d in groups[key]][:need]
    rest = [members for key, members in groups.items() if key not in open_groups]
    while len(picked) < need and rest:
        missing = need - len(picked)
        fitting = [m for m in rest if len(m) >= missing]
        members = min(fitting, key=len) if fitting else max(rest, key=len)
        rest.remove(members)
        picked += members[:missing]
    return picked


def spans_numa_nodes(devices: Collection[Device]) -> bool:
    """True when the devices sit on at least two distinct NUMA nodes."""
    first: int | None = None
    for device in devices:
        for node in device.numa_nodes:
            if first is None:
                first = node
            elif node != first:
                return True
    return False
