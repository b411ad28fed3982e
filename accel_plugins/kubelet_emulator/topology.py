"""NUMA topology hints and the Topology Manager's policies, as the kubelet computes them.

Pure functions, no I/O but :func:`machine_numa_nodes`. They follow the
kubelet's ``pkg/kubelet/cm/devicemanager/topology_hints.go`` (the device
manager's hints for one resource) and ``pkg/kubelet/cm/topologymanager``
(``policy.go``'s hint merger, the ``none``, ``best-effort``, ``restricted``
and ``single-numa-node`` policies, container scope):

- A resource whose devices report no NUMA node has no preference (``None``).
- Otherwise every non-empty set of the machine's NUMA nodes with enough
  available (or reusable) devices on it is a hint; the hints with the fewest
  nodes that *could* hold the request (counting every device, allocated or not)
  are preferred. No hint at all (``[]``) means the request cannot be met.
- The policy merges one hint per resource (every combination, affinities
  ANDed, preferred when all are preferred and equal) into the container's
  best hint and decides admission: ``best-effort`` always admits,
  ``restricted`` admits a preferred best hint only, ``single-numa-node`` does
  the same after keeping only single-node (or no-preference) hints.

A hint's affinity is a frozenset of NUMA node IDs, ``None`` for "any node".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations, product
from pathlib import Path

from accel_plugins.kubelet_emulator.model import DeviceState

NONE = "none"
BEST_EFFORT = "best-effort"
RESTRICTED = "restricted"
SINGLE_NUMA_NODE = "single-numa-node"
POLICIES = (NONE, BEST_EFFORT, RESTRICTED, SINGLE_NUMA_NODE)

# The Topology Manager refuses to start with more NUMA nodes than this (the hint
# merger's cost grows with 2^nodes).
MAX_NUMA_NODES = 8

_NODE_DIR = re.compile(r"node([0-9]+)")


@dataclass(frozen=True, slots=True)
class TopologyHint:
    """A NUMA affinity (``None``: no preference, any node) and whether it is preferred."""

    affinity: frozenset[int] | None
    preferred: bool

    @classmethod
    def of(cls, *nodes: int, preferred: bool = True) -> TopologyHint:
        return cls(frozenset(nodes), preferred)

    def __str__(self) -> str:
        return (
            f"{format_nodes(self.affinity)} ({'preferred' if self.preferred else 'not preferred'})"
        )

    def to_dict(self) -> dict[str, object]:
        nodes = None if self.affinity is None else sorted(self.affinity)
        return {"numa_nodes": nodes, "preferred": self.preferred}


def format_nodes(nodes: Collection[int] | None) -> str:
    """``0,1`` for a set of nodes, ``any`` for no preference."""
    if nodes is None:
        return "any"
    return ",".join(map(str, sorted(nodes))) or "(none)"


def _mask(nodes: Collection[int]) -> int:
    return sum(1 << n for n in set(nodes))


def _narrower(a: frozenset[int], b: frozenset[int]) -> bool:
    """bitmask.IsNarrowerThan: fewer nodes, or as many with the lower-numbered ones."""
    if len(a) == len(b):
        return _mask(a) < _mask(b)
    return len(a) < len(b)


def node_sets(numa_nodes: Sequence[int]) -> Iterator[frozenset[int]]:
    """Every non-empty set of the machine's nodes, smallest first (bitmask.IterateBitMasks)."""
    ordered = sorted(set(numa_nodes))
    for size in range(1, len(ordered) + 1):
        for combo in combinations(ordered, size):
            yield frozenset(combo)


def has_topology(devices: Mapping[str, DeviceState]) -> bool:
    """Whether any device of the resource reports a NUMA node (deviceHasTopologyAlignment)."""
    return any(d.numa_nodes for d in devices.values())


def device_hints(
    devices: Mapping[str, DeviceState],
    numa_nodes: Sequence[int],
    request: int,
    available: Collection[str],
    reusable: Collection[str] = (),
) -> list[TopologyHint]:
    """generateDeviceTopologyHints: the node sets that can hold ``request`` devices.

    ``devices`` are all the resource's devices (the minimal set size counts them
    all); ``available`` the healthy unallocated ones; ``reusable`` the pod's
    devices a container may take again (each must lie in the set).
    """
    min_size = len(set(numa_nodes))
    hints = []
    for nodes in node_sets(numa_nodes):
        if sum(1 for d in devices.values() if nodes & set(d.numa_nodes)) >= request:
            min_size = min(min_size, len(nodes))
        matching = 0
        for device_id in reusable:
            device = devices.get(device_id)
            if device is None or not device.numa_nodes:
                continue
            if not nodes & set(device.numa_nodes):
                break
            matching += 1
        else:
            matching += sum(
                1 for d in available if d in devices and nodes & set(devices[d].numa_nodes)
            )
            if matching >= request:
                hints.append(TopologyHint(nodes, False))
    return [TopologyHint(h.affinity, len(h.affinity or ()) == min_size) for h in hints]


def resource_hints(
    devices: Mapping[str, DeviceState],
    numa_nodes: Sequence[int],
    request: int,
    available: Collection[str],
    reusable: Collection[str] = (),
    allocated: Collection[str] = (),
) -> list[TopologyHint] | None:
    """The device manager's hints for one resource of one container (GetTopologyHints).

    ``None``: no device has topology, so no preference. ``allocated`` are the
    devices the container already holds (a restart): the hints are regenerated
    from them, or ``[]`` when their number differs from ``request``.
    ``[]`` also when fewer than ``request`` devices are available or reusable.
    """
    if not has_topology(devices):
        return None
    if allocated:
        if len(allocated) != request:
            return []
        return device_hints(devices, numa_nodes, request, allocated)
    if len(set(available) | set(reusable)) < request:
        return []
    return device_hints(devices, numa_nodes, request, available, reusable)


def _provider_hints(hints: Mapping[str, list[TopologyHint] | None]) -> list[list[TopologyHint]]:
    """filterProvidersHints for the device manager, the emulator's one hint provider."""
    if not hints:
        return [[TopologyHint(None, True)]]
    result = []
    for resource in sorted(hints):
        found = hints[resource]
        if found is None:
            result.append([TopologyHint(None, True)])
        elif not found:
            result.append([TopologyHint(None, False)])
        else:
            result.append(list(found))
    return result


def _merge_permutation(
    default: frozenset[int], permutation: Sequence[TopologyHint]
) -> TopologyHint:
    preferred = True
    affinities = [h.affinity for h in permutation if h.affinity is not None]
    merged = set(default)
    for affinity in affinities:
        merged &= affinity
        if affinity != affinities[0]:
            preferred = False
    if not all(h.preferred for h in permutation):
        preferred = False
    return TopologyHint(frozenset(merged), preferred)


class _Merger:
    """policy.go's HintMerger, with the default comparison (narrowest mask)."""

    def __init__(self, numa_nodes: Sequence[int], hints: list[list[TopologyHint]]) -> None:
        self.default = frozenset(numa_nodes)
        self.hints = hints
        # The largest of each resource's narrowest affinity: a non-preferred best hint
        # should be that wide, to hold the resource that needs the most nodes.
        counts = []
        for resource_hints in hints:
            narrowest: frozenset[int] | None = None
            for hint in resource_hints:
                if hint.affinity is None:
                    continue
                if narrowest is None or _narrower(hint.affinity, narrowest):
                    narrowest = hint.affinity
            if narrowest is not None:
                counts.append(len(narrowest))
        self.best_non_preferred = max(counts, default=0)

    @staticmethod
    def _fitter(current: TopologyHint, candidate: TopologyHint) -> TopologyHint:
        # Merged hints always carry a set of nodes (never None).
        have, other = current.affinity or frozenset(), candidate.affinity or frozenset()
        if have == other:
            return current
        return current if _narrower(have, other) else candidate

    def _compare(
        self, current: TopologyHint | None, candidate: TopologyHint
    ) -> TopologyHint | None:
        size = len(candidate.affinity or ())
        if size == 0:
            return current
        if current is None:
            return candidate
        if current.preferred != candidate.preferred:
            return candidate if candidate.preferred else current
        if current.preferred:
            return self._fitter(current, candidate)
        best, have = self.best_non_preferred, len(current.affinity or ())
        if have > best:
            return self._fitter(current, candidate)
        if have == best:
            return self._fitter(current, candidate) if size == best else current
        if size > best:
            return current
        if size == best:
            return candidate
        if size != have:
            return candidate if size > have else current
        return self._fitter(current, candidate)

    def merge(self) -> TopologyHint:
        best: TopologyHint | None = None
        for permutation in product(*self.hints):
            best = self._compare(best, _merge_permutation(self.default, permutation))
        return best if best is not None else TopologyHint(self.default, False)


def merge(
    policy: str,
    numa_nodes: Sequence[int],
    hints: Mapping[str, list[TopologyHint] | None],
) -> tuple[TopologyHint, bool]:
    """The container's best hint from the device manager's ``hints`` (resource -> hints),
    and whether ``policy`` admits it."""
    if policy == NONE:
        return TopologyHint(None, True), True
    providers = _provider_hints(hints)
    if policy == SINGLE_NUMA_NODE:
        providers = [
            [
                h
                for h in resource_hints
                if h.preferred and (h.affinity is None or len(h.affinity) == 1)
            ]
            for resource_hints in providers
        ]
        best = _Merger(numa_nodes, providers).merge()
        if best.affinity == frozenset(numa_nodes):
            best = TopologyHint(None, best.preferred)
        return best, best.preferred
    if policy not in (BEST_EFFORT, RESTRICTED):
        raise ValueError(f"unknown topology policy {policy!r}; choose one of {', '.join(POLICIES)}")
    best = _Merger(numa_nodes, providers).merge()
    return best, policy == BEST_EFFORT or best.preferred


def machine_numa_nodes(sys_root: Path = Path("/sys")) -> list[int]:
    """The host's NUMA nodes, from ``/sys/devices/system/node/node<N>``; [0] when unknown."""
    try:
        names = [p.name for p in (sys_root / "devices" / "system" / "node").iterdir()]
    except OSError:
        return [0]
    nodes = sorted(int(m[1]) for name in names if (m := _NODE_DIR.fullmatch(name)))
    return nodes or [0]
