"""How the device manager picks a container's devices of one resource (``devicesToAllocate``).

Devices the container already holds are kept; otherwise the pod's reusable
devices come first, then those on the affinity's NUMA nodes with
GetPreferredAllocation choosing among them, then the rest. Each choice
records where its devices came from, for the report.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Set
from dataclasses import dataclass

from accel_plugins.kubelet_emulator.errors import KubeletError
from accel_plugins.kubelet_emulator.model import DeviceState
from accel_plugins.kubelet_emulator.topology import TopologyHint, has_topology

PreferredCall = Callable[[list[str], list[str], int], Awaitable[list[str]]]


class DeviceAllocationError(KubeletError):
    """The device manager cannot choose the devices; the message is the kubelet's."""


# -- choosing devices ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreferredAsk:
    """One GetPreferredAllocation call: what was offered and what the plugin answered."""

    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int
    answer: tuple[str, ...]

    @property
    def ignored(self) -> tuple[str, ...]:
        """Answered IDs the kubelet drops: not among those offered."""
        offered = set(self.available)
        return tuple(d for d in self.answer if d not in offered)


@dataclass(frozen=True, slots=True)
class Choice:
    """The devices for one resource of one container, and where each came from."""

    device_ids: tuple[str, ...]
    # (source, ids) in the order taken; sources: reused, preferred, aligned, unaligned, any
    steps: tuple[tuple[str, tuple[str, ...]], ...] = ()
    preferred: PreferredAsk | None = None


def filter_by_affinity(
    devices: Mapping[str, DeviceState], available: Iterable[str], hint: TopologyHint | None
) -> tuple[list[str], list[str], list[str]]:
    """filterByAffinity: available devices on the hint's nodes, on other nodes, and without
    a NUMA node; all in the third list when the resource has no topology or there is no hint."""
    ids = sorted(available)
    if hint is None or hint.affinity is None or not has_topology(devices):
        return [], [], ids
    aligned, unaligned, none = [], [], []
    for device_id in ids:
        nodes = set(devices[device_id].numa_nodes)
        if not nodes:
            none.append(device_id)
        elif nodes & hint.affinity:
            aligned.append(device_id)
        else:
            unaligned.append(device_id)
    return aligned, unaligned, none


async def devices_to_allocate(
    resource: str,
    devices: Mapping[str, DeviceState],
    in_use: Set[str],
    reusable: Set[str],
    required: int,
    hint: TopologyHint | None,
    preferred: PreferredCall | None = None,
) -> Choice:
    """The kubelet's choice of ``required`` devices for a container that holds none yet.

    ``devices`` are all the resource's devices, ``in_use`` those any container
    holds, ``reusable`` the pod's devices this container may take again,
    ``hint`` the container's NUMA affinity and ``preferred`` the plugin's
    GetPreferredAllocation (None when it does not advertise it).
    """
    if not any(d.healthy for d in devices.values()):
        raise DeviceAllocationError(
            f"no healthy devices present; cannot allocate unhealthy devices {resource}"
        )
    chosen: list[str] = []
    steps: list[tuple[str, tuple[str, ...]]] = []
    asked: PreferredAsk | None = None
    needed = required

    def take(source: str, candidates: Iterable[str]) -> bool:
        nonlocal needed
        taken = []
        for device_id in candidates:
            if needed == 0:
                break
            if device_id not in chosen:
                chosen.append(device_id)
                taken.append(device_id)
                needed -= 1
        if taken:
            steps.append((source, tuple(taken)))
        return needed == 0

    async def ask(offered: Iterable[str]) -> list[str]:
        nonlocal asked
        if preferred is None:
            return []
        available, must = sorted(set(offered)), list(chosen)
        answer = await preferred(available, must, required)
        asked = PreferredAsk(tuple(available), tuple(must), required, tuple(answer))
        return answer

    def done() -> Choice:
        return Choice(tuple(chosen), tuple(steps), asked)

    if take("reused", sorted(reusable)):
        return done()
    healthy = {i for i, d in devices.items() if d.healthy}
    available = healthy - set(in_use) - set(chosen)
    if len(available) < needed:
        raise DeviceAllocationError(
            f"requested number of devices unavailable for {resource}. "
            f"Requested: {needed}, Available: {len(available)}"
        )
    aligned, unaligned, no_numa = filter_by_affinity(devices, available, hint)
    if needed < len(aligned):
        # Enough aligned devices to choose from: the plugin chooses among them.
        answer = await ask([*aligned, *chosen])
        if take("preferred", [d for d in answer if d in set(aligned)]) or take("aligned", aligned):
            return done()
    else:
        # Every aligned device first (the alignment the Topology Manager promised), then
        # the plugin chooses the rest among all available devices.
        if take("aligned", aligned):
            return done()
        answer = await ask([*available, *chosen])
        if take("preferred", [d for d in answer if d in available]):
            return done()
        if take("unaligned", unaligned) or take("any", no_numa):
            return done()
    raise DeviceAllocationError(
        "unexpectedly allocated less resources than required. "
        f"Requested: {required}, Got: {required - needed}"
    )
