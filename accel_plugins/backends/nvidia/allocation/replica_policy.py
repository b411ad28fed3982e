"""Replica spreading and packing: choosing among devices that share physical GPUs.

Time-sliced replicas follow the configured policy; MIG devices are packed.

Each device is a :class:`Slice`: its ID, the physical GPU it runs on, its
unit (the shared device for a replica, else the device itself) and its place
(MIG index, replica number) that "lowest" refers to. Must-include
slices are taken first; every further slice is picked one at a time, and the
answer is deterministic for a given input.

- ``spread`` (the default for replicas): one slice per physical GPU before a
  second one anywhere; among GPUs, the one with the most free slices, then
  the best linked to the GPUs the request already has (sum of pair scores),
  then the lowest index. On a GPU, the unit the request uses least, then
  the one with the most free slices, then the lowest slice. A pod thus gets
  as many GPUs' worth of time as the node can give it, and load evens out.
- ``packed``: fill one GPU first. GPUs the request already uses come first,
  then GPUs that can hold the whole rest of the request, the fullest of
  those (best fit, so emptier GPUs stay whole for larger requests); when no
  GPU can hold the rest, the one with the most free slices; ties go to the
  best linked, then the lowest index. On a GPU, the unit the request already
  uses, then the lowest slice.

MIG devices always use ``packed``: a multi-device request lands on as few
physical GPUs as it can, and single devices fill the fullest GPU first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from accel_plugins.plugin.allocation import natural_key

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

    _Key = TypeVar("_Key", bound=SupportsRichComparison)
else:
    _Key = TypeVar("_Key")

SPREAD = "spread"
PACKED = "packed"
POLICIES = (SPREAD, PACKED)

Link = Callable[[int, int], int]
"""The pair score of two physical GPUs, by GPU index."""


@dataclass(frozen=True, slots=True)
class Slice:
    id: str
    gpu: int
    unit: str
    order: tuple[int, ...] = ()
    """Where the slice sits, for "lowest" (e.g. MIG index then replica number); ID breaks ties."""

    def rank(self) -> tuple[tuple[int, ...], tuple[tuple[int, int | str], ...]]:
        return (self.order, natural_key(self.id))


class _State:
    """What the request holds so far and what is still free, per GPU and per unit."""

    def __init__(self, slices: Sequence[Slice], must: Sequence[str]) -> None:
        self.free: dict[int, list[Slice]] = {}
        self.unit_free: Counter[str] = Counter()
        self.used: Counter[int] = Counter()
        self.unit_used: Counter[str] = Counter()
        self.chosen: list[Slice] = []
        required = set(must)
        for s in sorted(slices, key=Slice.rank):
            if s.id in required:
                self.take(s)
            else:
                self.free.setdefault(s.gpu, []).append(s)
                self.unit_free[s.unit] += 1

    def take(self, s: Slice) -> None:
        self.chosen.append(s)
        self.used[s.gpu] += 1
        self.unit_used[s.unit] += 1

    def take_from(self, gpu: int, key: Callable[[Slice], _Key]) -> None:
        pool = self.free[gpu]
        best = min(pool, key=key)
        pool.remove(best)
        if not pool:
            del self.free[gpu]
        self.unit_free[best.unit] -= 1
        self.take(best)

    def linked(self, gpu: int, link: Link) -> int:
        return sum(link(gpu, other) for other in self.used if other != gpu)


def spread(slices: Sequence[Slice], must: Sequence[str], size: int, link: Link) -> list[str]:
    """``size`` slice IDs, one per physical GPU first (see the module docs)."""
    state = _State(slices, must)
    while len(state.chosen) < size and state.free:
        gpu = min(
            state.free,
            key=lambda g: (
                state.used[g],
                -len(state.free[g]),
                -state.linked(g, link),
                g,
            ),
        )
        state.take_from(
            gpu,
            lambda s: (state.unit_used[s.unit], -state.unit_free[s.unit], s.rank()),
        )
    return _answer(state)


def packed(slices: Sequence[Slice], must: Sequence[str], size: int, link: Link) -> list[str]:
    """``size`` slice IDs filling as few physical GPUs as possible (see the module docs)."""
    state = _State(slices, must)
    while len(state.chosen) < size and state.free:
        need = size - len(state.chosen)
        gpu = min(state.free, key=lambda g: _packing_order(state, g, need, link))
        state.take_from(gpu, lambda s: (-state.unit_used[s.unit], s.rank()))
    return _answer(state)


def _packing_order(state: _State, gpu: int, need: int, link: Link) -> tuple[int, ...]:
    free = len(state.free[gpu])
    fits = free >= need
    return (
        0 if state.used[gpu] else 1,
        0 if fits else 1,
        free if fits else -free,
        -state.linked(gpu, link),
        gpu,
    )


def _answer(state: _State) -> list[str]:
    return [s.id for s in sorted(state.chosen, key=Slice.rank)]


def choose(
    policy: str, slices: Sequence[Slice], must: Sequence[str], size: int, link: Link
) -> list[str]:
    """Run ``policy`` (spread or packed); ValueError for another name."""
    if policy == SPREAD:
        return spread(slices, must, size, link)
    if policy == PACKED:
        return packed(slices, must, size, link)
    raise ValueError(f"unknown placement policy {policy!r} (known: {', '.join(POLICIES)})")
