"""GPU sets as bitmasks: bit ``i`` of a mask is the GPU at position ``i``.

The search (:mod:`.best_effort_search`) and the link matrix
(:mod:`.pair_score`) pass sets of GPUs around as ints; these are the few
operations both need, with ties broken by the lowest sorted positions.
"""

from __future__ import annotations

from collections.abc import Sequence


def positions(mask: int) -> list[int]:
    """Set bits of ``mask``, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def mask_of(items: Sequence[int]) -> int:
    mask = 0
    for i in items:
        mask |= 1 << i
    return mask


def lower_first(a: int, b: int) -> bool:
    """True when the sorted positions of ``a`` come before those of ``b`` (same size)."""
    diff = a ^ b
    return bool(a & diff & -diff)


def min_group(groups: Sequence[int]) -> int:
    """The group whose sorted positions come first."""
    answer = groups[0]
    for group in groups[1:]:
        if lower_first(group, answer):
            answer = group
    return answer


def lowest(mask: int, count: int) -> int:
    """The ``count`` lowest set bits of ``mask``."""
    out = 0
    for _ in range(count):
        low = mask & -mask
        out |= low
        mask ^= low
    return out
