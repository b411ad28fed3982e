"""Whole-GPU placement: pair scores, the link matrix, and the exact best-effort search.

The search is checked against ``tests/placement_reference.py``, a plain
enumeration of every split written from the issue's words, on random and on
structured (symmetric) topologies.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_plugins.backends.nvidia.partition import (
    Partitioner,
    mask_of,
    positions,
    twin_classes,
)
from accel_plugins.backends.nvidia.placement import LinkMatrix, link_score
from accel_plugins.backends.nvidia.profiles import BUILTIN
from tests.placement_reference import best_effort, pairing_score, splits

TOKENS = ["NV1", "NV2", "NV4", "NV12", "PIX", "PXB", "PHB", "NODE", "SYS"]


def profile_weights(name: str) -> list[list[int]]:
    rows = BUILTIN[name]["topology"]
    assert isinstance(rows, list)
    return [
        [0 if i == j else link_score(t) for j, t in enumerate(row)] for i, row in enumerate(rows)
    ]


PAIRS = profile_weights("pcie-8gpu-nvlink-pairs")  # (0,1) (2,3) ... NV12; PIX per 4; SYS across
ALL8 = list(range(8))


# -- pair scores and the matrix -------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "score"),
    [
        pytest.param("NV1", 100, id="one-nvlink"),
        pytest.param("NV12", 1200, id="nv12"),
        pytest.param("NV18", 1800, id="nv18"),
        pytest.param("PIX", 50, id="pix"),
        pytest.param("PXB", 40, id="pxb"),
        pytest.param("PHB", 30, id="phb"),
        pytest.param("NODE", 20, id="node"),
        pytest.param("SYS", 10, id="sys"),
        pytest.param("SOC", 10, id="soc-old-name-of-sys"),
        pytest.param("X", 0, id="diagonal"),
        pytest.param("NV", 0, id="nv-without-count"),
        pytest.param("NVx", 0, id="nv-not-a-number"),
        pytest.param("", 0, id="empty"),
    ],
)
def test_link_scores(token: str, score: int) -> None:
    assert link_score(token) == score


def test_matrix_is_symmetric_and_addressed_by_gpu_index() -> None:
    # GPU 1 was lost at discovery: rows name peers 0, 2, 5 by index.
    matrix = LinkMatrix(
        {
            0: (("X", "NV4", "SYS"), (0, 2, 5)),
            2: (("NV4", "X", "PIX"), (0, 2, 5)),
            5: (("SYS", "PHB", "X"), (0, 2, 5)),  # disagrees with GPU 2's PIX: the better wins
        }
    )
    assert matrix.gpus == (0, 2, 5)
    assert [[matrix.score(a, b) for b in (0, 2, 5)] for a in (0, 2, 5)] == [
        [0, 400, 10],
        [400, 0, 50],
        [10, 50, 0],
    ]
    assert matrix.score(0, 1) == 0
    assert 1 not in matrix
    assert 2 in matrix
    assert matrix.choose([0, 2, 5], [], 2) == [0, 2]
    with pytest.raises(ValueError, match="GPU 1 is not in the link matrix"):
        matrix.choose([0, 1], [], 1)


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


def test_twin_classes_of_the_profiles() -> None:
    assert twin_classes(PAIRS) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert twin_classes(profile_weights("dgx-h100")) == [ALL8]
    assert twin_classes([[0, 5, 1], [5, 0, 2], [1, 2, 0]]) == [[0], [1], [2]]


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
    got = positions(Partitioner(PAIRS).choose(mask_of(available), mask_of(must), size))
    assert got == expected
    assert best_effort(PAIRS, available, must, size) == expected


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        pytest.param([1, 3, 5, 7], [], 2, [1, 3], id="lowest"),
        pytest.param([1, 3, 5, 7], [7], 2, [1, 7], id="must-include-and-lowest"),
        pytest.param(ALL8, [], 5, [0, 1, 2, 3, 4], id="five"),
    ],
)
def test_uniform_nvswitch_takes_the_lowest(
    available: list[int], must: list[int], size: int, expected: list[int]
) -> None:
    weights = profile_weights("dgx-h100")
    got = positions(Partitioner(weights).choose(mask_of(available), mask_of(must), size))
    assert got == expected == best_effort(weights, available, must, size)


def test_best_split_and_pairing_values() -> None:
    search = Partitioner(PAIRS)
    assert search.pairing(mask_of(ALL8)) == 4 * 1200
    assert search.pairing(mask_of([0, 2, 4])) == 50  # 0-2 on one switch, 4 alone
    assert search.best_split(mask_of(ALL8), 4) == 2 * (2 * 1200 + 4 * 50)
    assert search.best_split(mask_of(ALL8), 1) == 0
    assert search.score(mask_of([0, 1, 4])) == 1200 + 10 + 10


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


def test_reference_pairing() -> None:
    assert pairing_score(PAIRS, [0, 1, 2, 3]) == 2400
    assert pairing_score(PAIRS, [0, 2, 4]) == 50


# -- exactness against the reference ------------------------------------------------------------


@st.composite
def random_weights(draw: st.DrawFn, min_gpus: int = 2, max_gpus: int = 10) -> list[list[int]]:
    """Any symmetric matrix over a few tokens (few tokens: many ties and twins)."""
    n = draw(st.integers(min_gpus, max_gpus))
    tokens = draw(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4, unique=True))
    weights = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            weights[i][j] = weights[j][i] = link_score(draw(st.sampled_from(tokens)))
    return weights


@st.composite
def structured_weights(draw: st.DrawFn, min_gpus: int = 2, max_gpus: int = 10) -> list[list[int]]:
    """NVLink pairs or islands behind PCIe switches on NUMA nodes: symmetric topologies."""
    n = draw(st.integers(min_gpus, max_gpus))
    island = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    switch = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    numa = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    nvlinks = draw(st.lists(st.sampled_from([1, 2, 4, 12]), min_size=5, max_size=5))
    weights = [[0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            if island[i] == island[j] and island[i]:
                score = 100 * nvlinks[island[i]]
            elif switch[i] == switch[j] and numa[i] == numa[j]:
                score = 50
            else:
                score = 20 if numa[i] == numa[j] else 10
            weights[i][j] = weights[j][i] = score
    return weights


Request = tuple[list[int], list[int], int]


@st.composite
def requests(draw: st.DrawFn, n: int) -> Request:
    busy = draw(st.integers(0, n - 1))  # few busy GPUs are the expensive cases
    available = sorted(draw(st.permutations(range(n)))[busy:])
    size = draw(st.integers(1, len(available)))
    must = sorted(draw(st.sets(st.sampled_from(available), max_size=min(size, 3))))
    return available, must, size


def check_against_reference(data: st.DataObject, weights: list[list[int]]) -> None:
    search = Partitioner(weights)  # shared by the calls: its memo must stay exact
    for _ in range(3):
        available, must, size = data.draw(requests(len(weights)))
        got = positions(search.choose(mask_of(available), mask_of(must), size))
        assert got == best_effort(weights, available, must, size), (available, must, size)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(weights=random_weights(), data=st.data())
def test_exact_on_random_topologies(weights: list[list[int]], data: st.DataObject) -> None:
    check_against_reference(data, weights)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(weights=structured_weights(), data=st.data())
def test_exact_on_symmetric_topologies(weights: list[list[int]], data: st.DataObject) -> None:
    check_against_reference(data, weights)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    weights=st.one_of(random_weights(min_gpus=8), structured_weights(min_gpus=8)),
    data=st.data(),
)
def test_exact_on_eight_to_ten_gpus(weights: list[list[int]], data: st.DataObject) -> None:
    check_against_reference(data, weights)


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
        search = Partitioner(weights)
        for _ in range(8):
            available = sorted(rng.sample(range(n), rng.randint(n - 3, n)))
            size = rng.randint(1, len(available))
            must = sorted(rng.sample(available, rng.randint(0, min(size, 2))))
            got = positions(search.choose(mask_of(available), mask_of(must), size))
            assert got == best_effort(weights, available, must, size), (weights, available, must)


@pytest.mark.parametrize("size", range(1, 11))
def test_exact_for_every_size_on_ten_gpus(size: int) -> None:
    weights = [
        [0 if i == j else link_score(TOKENS[(7 * (i + j) + i * j) % 9]) for j in range(10)]
        for i in range(10)
    ]
    search = Partitioner(weights)
    for available in (list(range(10)), [0, 2, 3, 5, 6, 7, 8, 9]):
        for must in ([], available[-1:]):
            if size > len(available):
                continue
            got = positions(search.choose(mask_of(available), mask_of(must), size))
            assert got == best_effort(weights, available, must, size)


def test_every_answer_has_the_size_and_the_must_include_gpus() -> None:
    search = Partitioner(PAIRS)
    for size in range(1, 9):
        for must in ([], [3], [3, 6]):
            if len(must) > size:
                continue
            got = positions(search.choose(mask_of(ALL8), mask_of(must), size))
            assert len(got) == size
            assert set(must) <= set(got)
