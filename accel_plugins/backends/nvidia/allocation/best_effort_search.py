"""The search: NVIDIA's best-effort objective, exactly, over bitmasks.

GPUs are positions ``0..n-1`` (bit ``i`` of a mask is GPU ``i``; positions
follow GPU index order) and ``weights[i][j]`` is the pair score of GPUs ``i``
and ``j`` (:mod:`.pair_score`). A group's score is the sum of its pairs'
scores. For a request of ``size`` GPUs from ``available`` that must hold
``must``, the answer is:

1. among every split of ``available`` into groups of ``size`` (one smaller
   group when the count does not divide) in which one full group holds
   ``must``, the splits with the highest total score;
2. of their full groups that hold ``must``, one with the highest own score.

Steps 1 and 2 are NVIDIA's best-effort policy (go-gpuallocator). Where
groups still tie, NVIDIA takes whichever its enumeration met first; here:

3. the group that leaves the GPUs still free best paired (the highest
   best-split score of what is left into pairs, one alone when odd), then
   best grouped in fours: free NVLink pairs and quads stay whole for later
   pods;
4. the group on the fewest NUMA nodes (``numa``, one label per GPU; on an
   NVSwitch node every pair can tie, and a 4-GPU pod must not be split 1+3
   over two NUMA nodes while 4 are free on one);
5. the lowest sorted list of positions.

Why it is exact. The best split in which a full group ``G`` holds ``must``
scores ``score(G) + best_split(available - G)``, so the best total is the
maximum of that over every such ``G``, and ``G`` is a candidate exactly when
it reaches it. ``best_split`` is an exact dynamic programme: the lowest GPU of
a set is in a full group or in the one smaller group, which covers every
split. Pruning never changes a value: a branch is skipped only when an upper
bound says it cannot beat (or, where ties matter, tie) the best found so far.
The bound gives every GPU the sum of its ``size - 1`` best pair scores within
the set and halves the total (each pair is counted from both ends); no group
of ``size`` or fewer GPUs can give a GPU more.

Why it is fast. Twins (GPUs on one NUMA node that every other GPU scores
alike with, such as the two ends of an NVLink bridge or the GPUs of one PCIe
switch) are interchangeable, so the programme runs over how many GPUs of each
twin class a set holds, not over subsets. Interchangeable classes (two NVLink
pairs on one switch, two switches on one NUMA node) are found once per
topology, and sets that such swaps map onto each other share one memo entry.
Scores never change for a topology, so memoised values are kept across calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from accel_plugins.backends.nvidia.allocation.bitmasks import (
    lower_first,
    lowest,
    mask_of,
    min_group,
    positions,
)
from accel_plugins.backends.nvidia.allocation.twins import (
    canonical_value,
    symmetry_tree,
    twin_classes,
)

# Importable from here as before the split (tests and pair_score use them).
__all__ = [
    "MEMO_LIMIT",
    "Partitioner",
    "lower_first",
    "mask_of",
    "min_group",
    "positions",
    "twin_classes",
]

# Memo entries kept per group size before that memo starts over: bounds memory
# on large nodes; values are recomputed exactly when needed again.
MEMO_LIMIT = 1 << 18

# A group found by the enumeration: (key of its class counts, score, sum of bounds).
_Leaf = tuple[int, int, int]


class Partitioner:
    """The search for one topology, with memoised exact sub-results.

    Build one per device set and reuse it: pair scores never change, so the
    best-split values it remembers stay valid for every later call.
    """

    def __init__(
        self, weights: Sequence[Sequence[int]], numa: Sequence[int | None] | None = None
    ) -> None:
        n = len(weights)
        if numa is not None and len(numa) != n:
            raise ValueError(f"{len(numa)} NUMA nodes for {n} GPUs")
        for i, row in enumerate(weights):
            if len(row) != n:
                raise ValueError(f"weights row {i} has {len(row)} entries, expected {n}")
            for j in range(n):
                if i != j and row[j] != weights[j][i]:
                    raise ValueError(f"weights are not symmetric at ({i}, {j})")
                if i != j and row[j] < 0:
                    raise ValueError(f"weight ({i}, {j}) is negative")
        self.n = n
        self.weights: tuple[tuple[int, ...], ...] = tuple(
            tuple(0 if i == j else row[j] for j in range(n)) for i, row in enumerate(weights)
        )
        self.numa: tuple[int | None, ...] = tuple(numa) if numa is not None else (None,) * n
        self.classes = twin_classes(self.weights, self.numa)
        self._class_of = [0] * n
        for c, members in enumerate(self.classes):
            for i in members:
                self._class_of[i] = c
        self._class_node = [self.numa[members[0]] for members in self.classes]
        reps = [members[0] for members in self.classes]
        # cross[c][d]: the score between a GPU of class c and another GPU of class d
        # (the class's own inner score when c == d).
        self._cross = [
            [self._inner(c) if c == d else self.weights[rc][rd] for d, rd in enumerate(reps)]
            for c, rc in enumerate(reps)
        ]
        self._radix = []
        step = 1
        for members in self.classes:
            self._radix.append(step)
            step *= len(members) + 1
        self._splits: dict[int, dict[int, int]] = {}
        top = symmetry_tree(self.classes, self._cross)
        # Without interchangeable classes a state is its own canonical form.
        self._symmetric = len(top) < len(self.classes)
        self._top = top
        self._canon: dict[int, int] = {}

    def _inner(self, c: int) -> int:
        members = self.classes[c]
        return self.weights[members[0]][members[1]] if len(members) > 1 else 0

    # -- masks <-> class counts ---------------------------------------------------------

    def _counts(self, mask: int) -> list[int]:
        counts = [0] * len(self.classes)
        for i in positions(mask):
            counts[self._class_of[i]] += 1
        return counts

    def _key(self, counts: Sequence[int]) -> int:
        return sum(c * r for c, r in zip(counts, self._radix, strict=True))

    def _decode(self, key: int) -> list[int]:
        return [key // r % (len(m) + 1) for r, m in zip(self._radix, self.classes, strict=True)]

    def _realise(self, counts: Sequence[int], must: int, available: int) -> int:
        """The lowest GPUs with these class counts, ``must`` first."""
        mask = must
        taken = self._counts(must)
        free = available & ~must
        for c, members in enumerate(self.classes):
            need = counts[c] - taken[c]
            for i in members:
                if need <= 0:
                    break
                if free >> i & 1:
                    mask |= 1 << i
                    need -= 1
        return mask

    def _canonical(self, key: int) -> int:
        """One key for every set of counts that a symmetry of the topology maps onto ``key``."""
        if not self._symmetric:
            return key
        known = self._canon.get(key)
        if known is not None:
            return known
        counts = self._decode(key)
        value = 0
        step = 1
        for item in self._top:
            value += step * canonical_value(item, counts)
            step *= item.span
        if len(self._canon) >= MEMO_LIMIT:
            self._canon.clear()
        self._canon[key] = value
        return value

    # -- scores and bounds --------------------------------------------------------------

    def score(self, mask: int) -> int:
        """The group score of ``mask``."""
        return self._count_score(self._counts(mask))

    def _count_score(self, counts: Sequence[int]) -> int:
        present = [(c, k) for c, k in enumerate(counts) if k]
        total = 0
        for x, (c, k) in enumerate(present):
            row = self._cross[c]
            total += row[c] * k * (k - 1) // 2
            for d, m in present[x + 1 :]:
                total += row[d] * k * m
        return total

    def _bounds(self, counts: Sequence[int], size: int) -> list[int]:
        """Per class: the ``size - 1`` best pair scores a member can have among ``counts``."""
        out = [0] * len(counts)
        if size < 2:
            return out
        for c, row in enumerate(self._cross):
            if not counts[c]:
                continue
            offers = sorted(
                ((row[d], k - (d == c)) for d, k in enumerate(counts) if k - (d == c) > 0),
                reverse=True,
            )
            left = size - 1
            total = 0
            for weight, k in offers:
                take = min(k, left)
                total += weight * take
                left -= take
                if not left:
                    break
            out[c] = total
        return out

    def uniform(self, mask: int) -> bool:
        """Whether every pair inside ``mask`` has the same score."""
        members = positions(mask)
        if len(members) < 3:
            return True
        first = self.weights[members[0]][members[1]]
        return all(
            self.weights[a][b] == first for i, a in enumerate(members) for b in members[i + 1 :]
        )

    # -- the exact search ---------------------------------------------------------------

    def _groups(
        self,
        counts: Sequence[int],
        low: Sequence[int],
        need: int,
        b: Sequence[int],
    ) -> list[_Leaf]:
        """Every group of ``need`` GPUs within ``counts`` taking at least ``low`` per class.

        Leaves are (key of the group's counts, group score, sum of bounds).
        """
        out: list[_Leaf] = []
        cross = self._cross
        radix = self._radix
        classes = len(counts)
        # Classes that must contribute come first in the walk; the rest are optional.
        base: list[tuple[int, int]] = []
        score = 0
        bound = 0
        key = 0
        for c in range(classes):
            k = low[c]
            if k:
                row = cross[c]
                score += row[c] * k * (k - 1) // 2 + k * sum(row[d] * m for d, m in base)
                bound += k * b[c]
                key += k * radix[c]
                base.append((c, k))
                need -= k
        if need < 0:
            return out
        # Classes with GPUs left to offer, and how many all later ones offer together.
        offer = [(c, counts[c] - low[c]) for c in range(classes) if counts[c] > low[c]]
        after = [0] * (len(offer) + 1)
        for x in range(len(offer) - 1, -1, -1):
            after[x] = after[x + 1] + offer[x][1]

        def walk(
            x: int, need: int, parts: list[tuple[int, int]], score: int, bound: int, key: int
        ) -> None:
            if need == 0:
                out.append((key, score, bound))
                return
            for y in range(x, len(offer)):
                if after[y] < need:
                    return  # the remaining classes cannot fill the group
                d, top = offer[y]
                row = cross[d]
                link = sum(row[e] * m for e, m in parts)
                inner = row[d]
                for k in range(max(1, need - after[y + 1]), min(top, need) + 1):
                    walk(
                        y + 1,
                        need - k,
                        [*parts, (d, k)],
                        score + k * link + inner * (k * (k - 1) // 2),
                        bound + k * b[d],
                        key + k * radix[d],
                    )

        walk(0, need, base, score, bound, key)
        return out

    def best_split(self, mask: int, size: int) -> int:
        """The highest total score of a split of ``mask`` into groups of ``size``.

        One group is smaller when the count does not divide.
        """
        if size < 2:
            return 0
        counts = self._counts(mask)
        memo = self._splits.setdefault(size, {})
        return self._split(self._key(counts), size, self._bounds(counts, size), memo)

    def pairing(self, mask: int) -> int:
        """The best pairing score of ``mask`` (pairs, one GPU alone when odd)."""
        return self.best_split(mask, 2)

    def _split(self, key: int, size: int, b: Sequence[int], memo: dict[int, int]) -> int:
        """best_split over class counts; ``b`` bounds any superset of the counts."""
        canonical = self._canonical(key)
        known = memo.get(canonical)
        if known is not None:
            return known
        counts = self._decode(key)
        count = sum(counts)
        if count <= size:
            value = self._count_score(counts)  # one group: full, or the smaller one
        else:
            first = next(c for c, k in enumerate(counts) if k)
            low = [0] * len(counts)
            low[first] = 1
            b = self._bounds(counts, size)  # tighter than the caller's: fewer GPUs here
            # The lowest GPU is in a full group, or in the smaller one if any is left.
            leaves = self._groups(counts, low, size, b)
            extra = count % size
            if extra:
                leaves += self._groups(counts, low, extra, b)
            total = sum(k * bc for k, bc in zip(counts, b, strict=True))
            ranked = sorted(
                ((2 * score + total - bound, group, score) for group, score, bound in leaves),
                reverse=True,
            )
            value = -1
            for doubled, group, score in ranked:
                if doubled <= 2 * value:
                    break  # sorted by bound: no later group can do better
                candidate = score + self._split(key - group, size, b, memo)
                if candidate > value:
                    value = candidate
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        memo[canonical] = value
        return value

    def choose(self, available: int, must: int, size: int) -> int:
        """The best group of ``size`` GPUs from ``available`` holding ``must`` (masks)."""
        count = available.bit_count()
        if must & ~available:
            raise ValueError("must-include GPUs are not all available")
        if not 1 <= size <= count:
            raise ValueError(f"size {size} is not between 1 and {count}")
        if must.bit_count() > size:
            raise ValueError(f"{must.bit_count()} must-include GPUs do not fit in {size}")
        if size == count:
            return available
        if must.bit_count() == size:
            return must
        if self.uniform(available) and len({self.numa[i] for i in positions(available)}) == 1:
            # Every split and every group scores the same, and so does what is left.
            return must | lowest(available & ~must, size - must.bit_count())
        counts = self._counts(available)
        full = self._key(counts)
        if size == 1:
            # Every split of singles totals 0 (NVIDIA's answer is its first GPU): all tie.
            tied = [g for g, _, _ in self._groups(counts, [0] * len(counts), 1, [0] * len(counts))]
            return self._settle(tied, counts, must, available, size)
        b = self._bounds(counts, size)
        memo = self._splits.setdefault(size, {})
        leaves = self._groups(counts, self._counts(must), size, b)
        total = sum(k * bc for k, bc in zip(counts, b, strict=True))
        ranked = sorted(
            ((2 * score + total - bound, group, score) for group, score, bound in leaves),
            reverse=True,
        )
        best_total = -1
        tied_groups: list[tuple[int, int]] = []
        for doubled, group, score in ranked:
            if doubled < 2 * best_total:
                break  # ties still matter here, so only a strictly lower bound stops
            value = score + self._split(full - group, size, b, memo)
            if value > best_total:
                best_total, tied_groups = value, [(group, score)]
            elif value == best_total:
                tied_groups.append((group, score))
        top = max(score for _, score in tied_groups)
        finalists = [group for group, score in tied_groups if score == top]
        return self._settle(finalists, counts, must, available, size)

    def _settle(
        self, finalists: list[int], counts: Sequence[int], must: int, available: int, size: int
    ) -> int:
        """Steps 3 to 5: break the ties NVIDIA's objective leaves (groups as count keys)."""
        full = self._key(counts)
        for whole in (2, 4):
            if len(finalists) < 2 or whole == size:
                # Left over into groups of the request's own size: the total less the
                # group, equal for every finalist already.
                continue
            memo = self._splits.setdefault(whole, {})
            b = self._bounds(counts, whole)
            lefts = [(self._split(full - g, whole, b, memo), g) for g in finalists]
            best = max(left for left, _ in lefts)
            finalists = [g for left, g in lefts if left == best]
        if len(finalists) > 1:
            spans = [(self._nodes(g), g) for g in finalists]
            fewest = min(span for span, _ in spans)
            finalists = [g for span, g in spans if span == fewest]
        return min_group([self._realise(self._decode(g), must, available) for g in finalists])

    def _nodes(self, key: int) -> int:
        """How many NUMA nodes a group (as a count key) spans."""
        return len({self._class_node[c] for c, k in enumerate(self._decode(key)) if k})
