"""The whole-GPU objective of issue 5, by plain enumeration (a test and benchmark reference).

Written from the issue's words, with no cleverness: list every split, keep
those where a full group holds the must-include GPUs, take the best total,
then the best own score, the best leftover pairing and the lowest index list.
Exponential; for small GPU counts only.
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


def pairing_score(weights: Weights, gpus: Sequence[int]) -> int:
    """The best sum of pair scores over pairings of ``gpus`` (one alone when odd)."""
    if len(gpus) < 2:
        return 0
    return max(sum(score(weights, g) for g, _ in split) for split in splits(gpus, 2))


def best_effort(
    weights: Weights, available: Sequence[int], must: Sequence[int], size: int
) -> list[int]:
    """The GPUs issue 5 says a request of ``size`` should get, sorted."""
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

    def rank(group: Group) -> tuple[int, int, Group]:
        left = [g for g in available if g not in group]
        return (-score(weights, group), -pairing_score(weights, left), tuple(sorted(group)))

    best = min(candidates, key=rank)
    return sorted(best)
