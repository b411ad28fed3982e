"""Interchangeable GPUs: twin classes, and the symmetry tree over them.

Why the search needs them: a set's best split depends only on how many GPUs
of each twin class it holds, and sets that swaps of interchangeable items map
onto each other split equally well, so :mod:`.best_effort_search` memoises
one entry per such family instead of one per subset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def twin_classes(
    weights: Sequence[Sequence[int]], labels: Sequence[object] | None = None
) -> list[list[int]]:
    """GPUs grouped into classes of interchangeable ones, lowest first.

    Two GPUs are twins when they have the same label (NUMA node) and every
    other GPU scores the same with both (an NVLink pair behind one switch,
    the GPUs of one PCIe switch, an NVSwitch island). Twinship is an
    equivalence and all pairs inside a class score alike, so a set's best
    split depends only on how many GPUs of each class it holds: the search
    runs over those counts, far fewer than subsets.
    """
    n = len(weights)
    label = list(labels) if labels is not None else [None] * n
    classes: list[list[int]] = []
    for i in range(n):
        for members in classes:
            j = members[0]
            if label[i] == label[j] and all(
                weights[i][x] == weights[j][x] for x in range(n) if x not in (i, j)
            ):
                members.append(i)
                break
        else:
            classes.append([i])
    return classes


@dataclass(frozen=True, slots=True)
class SymmetryItem:
    """A twin class, or interchangeable copies of one kind of item (a node of symmetry)."""

    kind: tuple[object, ...]
    span: int  # canonical values are 0 .. span-1
    leaf: int = -1  # the twin class of a leaf item
    kids: tuple[SymmetryItem, ...] = ()


def symmetry_tree(
    classes: Sequence[Sequence[int]], cross: Sequence[Sequence[int]]
) -> list[SymmetryItem]:
    """Merge interchangeable items until none are left: the top items of the symmetry tree.

    Two items are interchangeable when they are of one kind and every other
    item scores the same with both; swapping them then maps the topology
    onto itself, so sets that differ by such swaps split equally well. Items
    are modules (GPUs outside score alike with all of an item), so the score
    between two items is that of any GPU of one with any GPU of the other.
    """
    items = [
        (SymmetryItem(kind=("class", len(m), cross[c][c]), span=len(m) + 1, leaf=c), c)
        for c, m in enumerate(classes)
    ]
    while True:
        groups: list[list[tuple[SymmetryItem, int]]] = []
        for item, rep in items:
            for group in groups:
                other, orep = group[0]
                if other.kind == item.kind and all(
                    cross[rep][x] == cross[orep][x] for _, x in items if x not in (rep, orep)
                ):
                    group.append((item, rep))
                    break
            else:
                groups.append([(item, rep)])
        if len(groups) == len(items):
            return [item for item, _ in items]
        items = []
        for group in groups:
            first, rep = group[0]
            if len(group) == 1:
                items.append(group[0])
                continue
            kind = ("set", len(group), first.kind, cross[rep][group[1][1]])
            kids = tuple(item for item, _ in group)
            items.append((SymmetryItem(kind=kind, span=first.span ** len(group), kids=kids), rep))


def canonical_value(item: SymmetryItem, counts: Sequence[int]) -> int:
    """``item``'s part of a set's memo key: equal for sets its swaps map onto each other."""
    if not item.kids:
        return counts[item.leaf]
    values = sorted(canonical_value(kid, counts) for kid in item.kids)
    span = item.kids[0].span
    out = 0
    for value in reversed(values):
        out = out * span + value
    return out
