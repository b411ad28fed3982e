"""The search: NVIDIA's best-effort objective, found exactly, and our tie-breaks.

The search is checked against ``tests/support/best_effort_reference.py``, a plain
enumeration of every split written from the policy's words, on random and on
structured (symmetric) topologies scored as NVIDIA scores pairs. NVIDIA's own
test tables are in ``test_nvidia_go_gpuallocator.py``.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_plugins.backends.nvidia.allocation.best_effort_search import (
    Partitioner,
    mask_of,
    positions,
    twin_classes,
)
from accel_plugins.backends.nvidia.allocation.pair_score import LinkMatrix, link_score
from accel_plugins.backends.nvidia.discovery import discover
from accel_plugins.backends.nvidia.nvml import session
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from tests.fixtures.nvidia import profile
from tests.support.best_effort_reference import best_effort, pairing_score, split_score, splits

# NVIDIA pair tokens: few per topology, so many ties and twins.
TOKENS = [
    "NV1+PIX",
    "NV1+PHB",
    "NV2+SYS",
    "NV4+NODE",
    "NV12+PIX",
    "BOARD",
    "PIX",
    "PXB",
    "PHB",
    "NODE",
    "SYS",
]


def profile_matrix(name: str) -> tuple[list[list[int]], list[int | None]]:
    """Pair scores and NUMA nodes of a built-in profile, as discovery reads them."""
    nvml = SimulatedNvml(profile(name))
    with session(nvml):
        node = discover(nvml)
    matrix = LinkMatrix.from_gpus(node.gpus)
    return [list(row) for row in matrix.weights], list(matrix.partitioner.numa)


# (0,1) (2,3) ... NV12+PIX; PIX within 0-3 and 4-7; SYS across the NUMA nodes 0-3 | 4-7.
PAIRS, HALVES = profile_matrix("pcie-8gpu-nvlink-pairs")
ALL8 = list(range(8))


def choose(
    weights: list[list[int]],
    numa: list[int | None] | None,
    available: list[int],
    must: list[int],
    size: int,
) -> list[int]:
    return positions(Partitioner(weights, numa).choose(mask_of(available), mask_of(must), size))


@pytest.mark.parametrize(
    ("weights", "problem"),
    [
        pytest.param([[0, 1], [2, 0]], "not symmetric", id="asymmetric"),
        pytest.param([[0, 1], [1]], "row 1 has 1 entries", id="ragged"),
        pytest.param([[0, -1], [-1, 0]], "negative", id="negative"),
    ],
)
def test_partitioner_refuses_bad_weights(weights: list[list[int]], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Partitioner(weights)


def test_partitioner_refuses_a_numa_list_of_another_length() -> None:
    with pytest.raises(ValueError, match="3 NUMA nodes for 2 GPUs"):
        Partitioner([[0, 1], [1, 0]], [0, 0, 1])


@pytest.mark.parametrize(
    ("available", "must", "size", "problem"),
    [
        pytest.param([0, 1], [2], 1, "not all available", id="must-not-available"),
        pytest.param([0, 1], [], 3, "not between 1 and 2", id="too-large"),
        pytest.param([0, 1], [], 0, "not between 1 and 2", id="zero"),
        pytest.param([0, 1, 2], [0, 1], 1, "do not fit", id="must-too-many"),
    ],
)
def test_impossible_requests_are_refused(
    available: list[int], must: list[int], size: int, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        Partitioner(PAIRS).choose(mask_of(available), mask_of(must), size)


def test_twin_classes() -> None:
    assert twin_classes(PAIRS) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    nvswitch, numa = profile_matrix("dgx-h100")
    assert twin_classes(nvswitch, numa) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert twin_classes([[0, 5, 1], [5, 0, 2], [1, 2, 0]]) == [[0], [1], [2]]
    uniform = [[0 if i == j else 7 for j in range(4)] for i in range(4)]
    assert twin_classes(uniform) == [[0, 1, 2, 3]]
    assert twin_classes(uniform, [1, 0, 1, 0]) == [[0, 2], [1, 3]]  # twins share a NUMA node


# -- named cases on pcie-8gpu-nvlink-pairs ----------------------------------------------------


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        pytest.param(ALL8, [], 1, [0], id="1-gpu-all-free-lowest"),
        pytest.param(
            [0, 2, 3, 4, 5, 6, 7], [], 1, [0], id="1-gpu-takes-the-gpu-whose-partner-is-busy"
        ),
        pytest.param(
            [0, 1, 2, 3, 5, 6, 7], [], 1, [5], id="1-gpu-lone-gpu-even-with-a-higher-index"
        ),
        pytest.param([1, 2, 3, 4, 6, 7], [], 2, [2, 3], id="2-gpu-gets-a-linked-pair"),
        pytest.param([0, 2, 3, 5], [], 2, [2, 3], id="2-gpu-linked-pair-over-two-lone-gpus"),
        pytest.param([0, 3, 5, 6], [], 2, [0, 3], id="2-gpu-lone-gpus-on-one-switch"),
        pytest.param(ALL8, [], 2, [0, 1], id="2-gpu-all-free"),
        pytest.param(ALL8, [], 3, [0, 1, 2], id="3-gpu-pair-and-a-switch-mate"),
        pytest.param(ALL8, [], 4, [0, 1, 2, 3], id="4-gpu-two-pairs-on-one-switch"),
        pytest.param([0, 1, 2, 3, 4, 5, 6], [], 4, [0, 1, 2, 3], id="4-gpu-the-whole-switch"),
        pytest.param(
            [0, 2, 4, 5, 6, 7], [], 4, [4, 5, 6, 7], id="4-gpu-a-free-switch-over-lone-gpus"
        ),
        pytest.param(ALL8, [], 6, [0, 1, 2, 3, 4, 5], id="6-gpu"),
        pytest.param(ALL8, [], 8, ALL8, id="everything"),
        pytest.param(ALL8, [4], 2, [4, 5], id="must-include-gets-its-partner"),
        pytest.param(ALL8, [0, 7], 2, [0, 7], id="must-include-fills-the-request"),
        pytest.param(ALL8, [5], 4, [4, 5, 6, 7], id="must-include-picks-its-switch"),
        pytest.param(ALL8, [1, 6], 4, [0, 1, 6, 7], id="must-include-across-switches"),
        pytest.param([0, 2, 3, 4, 5], [0], 2, [0, 2], id="must-include-lone-gpu-spares-pairs"),
    ],
)
def test_pcie_pairs(available: list[int], must: list[int], size: int, expected: list[int]) -> None:
    assert choose(PAIRS, HALVES, available, must, size) == expected
    assert best_effort(PAIRS, available, must, size, HALVES) == expected


UNIFORM = [[0 if i == j else 20 for j in range(8)] for i in range(8)]


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        pytest.param([1, 3, 5, 7], [], 2, [1, 3], id="lowest"),
        pytest.param([1, 3, 5, 7], [7], 2, [1, 7], id="must-include-and-lowest"),
        pytest.param(ALL8, [], 5, [0, 1, 2, 3, 4], id="five"),
    ],
)
def test_every_pair_alike_on_one_numa_node_takes_the_lowest(
    available: list[int], must: list[int], size: int, expected: list[int]
) -> None:
    assert choose(UNIFORM, None, available, must, size) == expected
    assert best_effort(UNIFORM, available, must, size) == expected


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        # Every pair ties (NVIDIA's objective cannot tell): one NUMA node wins over the
        # lowest indices. A 4-GPU pod is not split 1+3 while 4 are free on one node.
        pytest.param([3, 4, 5, 6, 7], [], 4, [4, 5, 6, 7], id="four-on-one-node-not-1-plus-3"),
        pytest.param([2, 3, 4, 5, 6], [], 2, [2, 3], id="two-on-one-node"),
        pytest.param([2, 3, 4, 5], [4], 2, [4, 5], id="must-include-picks-its-own-node"),
        pytest.param(ALL8, [], 4, [0, 1, 2, 3], id="then-the-lowest"),
        pytest.param(
            [0, 1, 2, 4, 5, 6, 7], [], 5, [0, 1, 2, 4, 5], id="two-nodes-anyway-then-lowest"
        ),
    ],
)
def test_ties_go_to_one_numa_node(
    available: list[int], must: list[int], size: int, expected: list[int]
) -> None:
    assert choose(UNIFORM, HALVES, available, must, size) == expected
    assert best_effort(UNIFORM, available, must, size, HALVES) == expected


def test_nvswitch_node_keeps_a_pod_on_one_numa_node() -> None:
    # dgx-h100 scores NODE (20) within a NUMA node and SYS (10) across: NVIDIA's own
    # objective already keeps the pod on one node.
    weights, numa = profile_matrix("dgx-h100")
    assert choose(weights, numa, [3, 4, 5, 6, 7], [], 4) == [4, 5, 6, 7]
    assert choose(weights, numa, [0, 1, 4, 5, 6], [], 2) == [0, 1]


def quads(token: str) -> list[list[int]]:
    """Two fully NVLinked quads, 0-3 and 4-7 (``token`` within one), SYS across."""
    inside = link_score(token)
    return [[0 if i == j else inside if i // 4 == j // 4 else 10 for j in range(8)] for i in ALL8]


@pytest.mark.parametrize(
    ("available", "size", "expected"),
    [
        # NVIDIA's objective ties every single GPU; leftover pairs tie too (two either
        # way): the lone pair 4-5 is taken so the quad 0-3 stays whole.
        pytest.param([0, 1, 2, 3, 4, 5], 1, [4], id="1-gpu-spares-the-free-quad"),
        pytest.param([0, 1, 2, 3, 4, 5, 6], 2, [4, 5], id="2-gpu-spares-the-free-quad"),
        pytest.param([0, 1, 2, 3, 5], 1, [5], id="1-gpu-takes-the-lone-gpu"),
    ],
)
def test_ties_keep_free_quads_whole(available: list[int], size: int, expected: list[int]) -> None:
    weights = quads("NV1+PHB")
    assert choose(weights, HALVES, available, [], size) == expected
    assert best_effort(weights, available, [], size, HALVES) == expected


def test_best_split_and_pairing_values() -> None:
    search = Partitioner(PAIRS)
    assert search.pairing(mask_of(ALL8)) == 4 * 1250
    assert search.pairing(mask_of([0, 2, 4])) == 50  # 0-2 on one switch, 4 alone
    assert search.best_split(mask_of(ALL8), 4) == 2 * (2 * 1250 + 4 * 50)
    assert search.best_split(mask_of(ALL8), 1) == 0
    assert search.score(mask_of([0, 1, 4])) == 1250 + 10 + 10


# -- the reference itself ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "size", "splits_count"),
    [
        pytest.param(4, 2, 3, id="pairs-of-4"),
        pytest.param(5, 2, 15, id="pairs-of-5-one-alone"),
        pytest.param(6, 3, 10, id="triples-of-6"),
        pytest.param(7, 3, 70, id="triples-of-7-one-alone"),
        pytest.param(5, 5, 1, id="one-group"),
        pytest.param(3, 1, 1, id="singles"),
    ],
)
def test_reference_enumerates_every_split_once(count: int, size: int, splits_count: int) -> None:
    found = [tuple(sorted(g for g, _ in split)) for split in splits(range(count), size)]
    assert len(found) == len(set(found)) == splits_count


def test_reference_split_scores() -> None:
    assert pairing_score(PAIRS, [0, 1, 2, 3]) == 2500
    assert pairing_score(PAIRS, [0, 2, 4]) == 50
    assert split_score(PAIRS, [0, 1, 2, 3, 4], 4) == 2 * 1250 + 4 * 50  # 4 alone
    assert split_score(PAIRS, [0], 4) == 0


# -- exactness against the reference ------------------------------------------------------------

Topology = tuple[list[list[int]], list[int | None]]


@st.composite
def random_topologies(draw: st.DrawFn, min_gpus: int = 2, max_gpus: int = 10) -> Topology:
    """Any symmetric matrix of NVIDIA pair scores over a few tokens, random NUMA nodes."""
    n = draw(st.integers(min_gpus, max_gpus))
    tokens = draw(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4, unique=True))
    weights = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            weights[i][j] = weights[j][i] = link_score(draw(st.sampled_from(tokens)))
    numa = draw(st.lists(st.sampled_from([0, 1, None]), min_size=n, max_size=n))
    return weights, numa


@st.composite
def structured_topologies(draw: st.DrawFn, min_gpus: int = 2, max_gpus: int = 10) -> Topology:
    """NVLink pairs or islands behind PCIe switches on NUMA nodes: symmetric topologies.

    Each pair scores as NVIDIA scores it: 100 per NVLink plus its PCIe relation.
    """
    n = draw(st.integers(min_gpus, max_gpus))
    island = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    switch = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    numa = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    nvlinks = draw(st.lists(st.sampled_from([1, 2, 4, 12]), min_size=5, max_size=5))
    weights = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            links = nvlinks[island[i]] if island[i] == island[j] and island[i] else 0
            same_switch = switch[i] == switch[j]
            relation = "SYS" if numa[i] != numa[j] else "PIX" if same_switch else "NODE"
            token = f"NV{links}+{relation}" if links else relation
            weights[i][j] = weights[j][i] = link_score(token)
    return weights, list(numa)


Request = tuple[list[int], list[int], int]


@st.composite
def requests(draw: st.DrawFn, n: int) -> Request:
    busy = draw(st.integers(0, n - 1))  # few busy GPUs are the expensive cases
    available = sorted(draw(st.permutations(range(n)))[busy:])
    size = draw(st.integers(1, len(available)))
    must = sorted(draw(st.sets(st.sampled_from(available), max_size=min(size, 3))))
    return available, must, size


def check_against_reference(data: st.DataObject, topology: Topology) -> None:
    weights, numa = topology
    search = Partitioner(weights, numa)  # shared by the calls: its memo must stay exact
    for _ in range(3):
        available, must, size = data.draw(requests(len(weights)))
        got = positions(search.choose(mask_of(available), mask_of(must), size))
        assert got == best_effort(weights, available, must, size, numa), (available, must, size)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=random_topologies(), data=st.data())
def test_exact_on_random_topologies(topology: Topology, data: st.DataObject) -> None:
    check_against_reference(data, topology)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=structured_topologies(), data=st.data())
def test_exact_on_symmetric_topologies(topology: Topology, data: st.DataObject) -> None:
    check_against_reference(data, topology)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    topology=st.one_of(random_topologies(min_gpus=8), structured_topologies(min_gpus=8)),
    data=st.data(),
)
def test_exact_on_eight_to_ten_gpus(topology: Topology, data: st.DataObject) -> None:
    check_against_reference(data, topology)


@pytest.mark.parametrize("seed", range(4))
def test_exact_on_a_seeded_sweep_of_nine_and_ten_gpus(seed: int) -> None:
    # Hypothesis favours small cases; this spreads requests evenly over large ones.
    rng = random.Random(seed)
    for _ in range(6):
        n = rng.choice([9, 10])
        tokens = rng.sample(TOKENS, rng.randint(2, 4))
        weights = [[0] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                weights[i][j] = weights[j][i] = link_score(rng.choice(tokens))
        numa: list[int | None] = [rng.randint(0, 1) for _ in range(n)]
        search = Partitioner(weights, numa)
        for _ in range(8):
            available = sorted(rng.sample(range(n), rng.randint(n - 3, n)))
            size = rng.randint(1, len(available))
            must = sorted(rng.sample(available, rng.randint(0, min(size, 2))))
            got = positions(search.choose(mask_of(available), mask_of(must), size))
            expected = best_effort(weights, available, must, size, numa)
            assert got == expected, (weights, numa, available, must)


@pytest.mark.parametrize("size", range(1, 11))
def test_exact_for_every_size_on_ten_gpus(size: int) -> None:
    weights = [
        [
            0 if i == j else link_score(TOKENS[(7 * (i + j) + i * j) % len(TOKENS)])
            for j in range(10)
        ]
        for i in range(10)
    ]
    numa: list[int | None] = [i % 3 % 2 for i in range(10)]
    search = Partitioner(weights, numa)
    for available in (list(range(10)), [0, 2, 3, 5, 6, 7, 8, 9]):
        for must in ([], available[-1:]):
            if size > len(available):
                continue
            got = positions(search.choose(mask_of(available), mask_of(must), size))
            assert got == best_effort(weights, available, must, size, numa)


def test_every_answer_has_the_size_and_the_must_include_gpus() -> None:
    search = Partitioner(PAIRS, HALVES)
    for size in range(1, 9):
        for must in ([], [3], [3, 6]):
            if len(must) > size:
                continue
            got = positions(search.choose(mask_of(ALL8), mask_of(must), size))
            assert len(got) == size
            assert set(must) <= set(got)
