"""The whole-GPU objective by plain enumeration (a test and benchmark reference).

Written from the words of NVIDIA's best-effort policy and our tie-breaks,
with no cleverness: list every split, keep those where a full group holds
the must-include GPUs, take the best total, then the best own score (NVIDIA's
objective); then the best pairing of what is left, its best grouping in
fours, the fewest NUMA nodes and the lowest index list (ours). Exponential;
for small GPU counts only.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

Weights = Sequence[Sequence[int]]
Group = tuple[int, ...]


def splits(gpus: Sequence[int], size: int) -> Iterator[list[tuple[Group, bool]]]:
    """Every split of ``gpus`` into groups of ``size``, one smaller when the count does not divide.

    Each group comes with True when it is a full group.
    """
    smaller = len(gpus) % size

    def rest(left: list[int], smaller_left: bool) -> Iterator[list[tuple[Group, bool]]]:
        if not left:
            yield []
            return
        first, others = left[0], left[1:]
        # The first GPU left is in a full group, or in the smaller one if not yet used.
        options = [(size, True)] + ([(smaller, False)] if smaller_left else [])
        for group_size, full in options:
            for mates in itertools.combinations(others, group_size - 1):
                group = (first, *mates)
                remaining = [g for g in others if g not in mates]
                for tail in rest(remaining, smaller_left and full):
                    yield [(group, full), *tail]

    yield from rest(sorted(gpus), smaller > 0)


def score(weights: Weights, group: Sequence[int]) -> int:
    return sum(weights[a][b] for a, b in itertools.combinations(group, 2))


def split_score(weights: Weights, gpus: Sequence[int], size: int) -> int:
    """The best total over splits of ``gpus`` into groups of ``size`` (one smaller)."""
    if len(gpus) < 2 or size < 2:
        return 0
    return max(sum(score(weights, g) for g, _ in split) for split in splits(gpus, size))


def pairing_score(weights: Weights, gpus: Sequence[int]) -> int:
    """The best sum of pair scores over pairings of ``gpus`` (one alone when odd)."""
    return split_score(weights, gpus, 2)


def nvidia_candidates(
    weights: Weights, available: Sequence[int], must: Sequence[int], size: int
) -> tuple[int, dict[Group, int]]:
    """NVIDIA's objective: the best total, and every full group holding ``must`` in a best split.

    Each candidate group maps to its own score; NVIDIA answers one with the
    highest own score.
    """
    required = set(must)
    best_total = -1
    candidates: set[Group] = set()
    for split in splits(available, size):
        holding = [g for g, full in split if full and required <= set(g)]
        if not holding:
            continue
        total = sum(score(weights, g) for g, _ in split)
        if total > best_total:
            best_total, candidates = total, set(holding)
        elif total == best_total:
            candidates.update(holding)
    return best_total, {g: score(weights, g) for g in candidates}


def objective(
    weights: Weights, available: Sequence[int], group: Sequence[int], size: int
) -> tuple[int, int]:
    """How NVIDIA's objective rates answering ``group``: (best total with it, its own score)."""
    chosen = set(group)
    rest = [g for g in available if g not in chosen]
    return score(weights, group) + split_score(weights, rest, size), score(weights, group)


def best_effort(
    weights: Weights,
    available: Sequence[int],
    must: Sequence[int],
    size: int,
    numa: Sequence[int | None] | None = None,
) -> list[int]:
    """The GPUs a request of ``size`` should get, sorted."""
    _, candidates = nvidia_candidates(weights, available, must, size)
    top = max(candidates.values())

    def rank(group: Group) -> tuple[int, int, int, Group]:
        left = [g for g in available if g not in group]
        nodes = len({numa[g] for g in group}) if numa is not None else 1
        return (
            -pairing_score(weights, left),
            -split_score(weights, left, 4),
            nodes,
            tuple(sorted(group)),
        )

    best = min((g for g, own in candidates.items() if own == top), key=rank)
    return sorted(best)
