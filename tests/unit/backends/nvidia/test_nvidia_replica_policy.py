"""Replica and MIG placement: the spread and packed policies over shared physical GPUs."""

from __future__ import annotations

import pytest

from accel_plugins.backends.nvidia.allocation.replica_policy import Slice, choose, packed, spread


def replicas(free: dict[int, int], *, total: int = 4) -> list[Slice]:
    """``free[gpu]`` free replicas of each GPU, named ``g<gpu>::<n>`` (the busy ones first)."""
    return [
        Slice(id=f"g{gpu}::{n}", gpu=gpu, unit=f"g{gpu}")
        for gpu, count in free.items()
        for n in range(total - count, total)
    ]


def pairs_link(a: int, b: int) -> int:
    """GPUs 0-1 and 2-3 NVLinked (1200), PIX (50) within 0-3, SYS (10) beyond."""
    if a // 2 == b // 2:
        return 1200
    return 50 if a // 4 == b // 4 else 10


@pytest.mark.parametrize(
    ("free", "must", "size", "expected"),
    [
        pytest.param(
            {0: 4, 1: 4, 2: 4, 3: 4}, [], 2, ["g0::0", "g1::0"], id="two-gpus-best-linked"
        ),
        pytest.param(
            {0: 4, 1: 4, 2: 4, 3: 4},
            [],
            4,
            ["g0::0", "g1::0", "g2::0", "g3::0"],
            id="one-slice-per-gpu",
        ),
        pytest.param(
            {0: 1, 1: 3, 2: 4, 3: 2}, [], 1, ["g2::0"], id="the-gpu-with-most-free-replicas"
        ),
        pytest.param(
            {0: 1, 1: 3, 2: 4, 3: 2},
            [],
            2,
            ["g1::1", "g2::0"],
            id="most-free-then-next-most-free",
        ),
        pytest.param(
            {0: 4, 1: 4, 4: 4},
            [],
            5,
            ["g0::0", "g0::1", "g1::0", "g1::1", "g4::0"],
            id="second-slices-after-every-gpu-has-one",
        ),
        pytest.param(
            {0: 4, 1: 4, 2: 4, 3: 4},
            ["g2::3"],
            2,
            ["g2::3", "g3::0"],
            id="must-include-counts-as-used-and-links",
        ),
        pytest.param(
            {0: 4, 1: 4},
            ["g0::0", "g0::1"],
            3,
            ["g0::0", "g0::1", "g1::0"],
            id="must-include-on-one-gpu-then-spread",
        ),
    ],
)
def test_spread(free: dict[int, int], must: list[str], size: int, expected: list[str]) -> None:
    assert spread(replicas(free), must, size, pairs_link) == expected
    assert choose("spread", replicas(free), must, size, pairs_link) == expected


@pytest.mark.parametrize(
    ("free", "must", "size", "expected"),
    [
        pytest.param({0: 4, 1: 4, 2: 4}, [], 3, ["g0::0", "g0::1", "g0::2"], id="fills-one-gpu"),
        pytest.param({0: 4, 1: 3, 2: 2}, [], 2, ["g2::2", "g2::3"], id="best-fit"),
        pytest.param({0: 4, 1: 3, 2: 2}, [], 1, ["g2::2"], id="single-slice-on-the-fullest-gpu"),
        pytest.param(
            {0: 2, 1: 3, 2: 1},
            [],
            5,
            ["g0::2", "g0::3", "g1::1", "g1::2", "g1::3"],
            id="no-gpu-fits-largest-first-then-best-fit",
        ),
        pytest.param(
            {0: 4, 1: 4, 2: 4, 3: 4},
            ["g3::0"],
            3,
            ["g3::0", "g3::1", "g3::2"],
            id="must-include-gpu-first",
        ),
        pytest.param(
            {0: 1, 1: 4, 2: 1, 3: 4},
            ["g0::3"],
            3,
            ["g0::3", "g1::0", "g1::1"],
            id="overflow-goes-to-the-best-linked",
        ),
    ],
)
def test_packed(free: dict[int, int], must: list[str], size: int, expected: list[str]) -> None:
    assert packed(replicas(free), must, size, pairs_link) == expected
    assert choose("packed", replicas(free), must, size, pairs_link) == expected


def test_spread_prefers_distinct_units_on_one_gpu() -> None:
    # Replicas of two MIG devices on GPU 0: spread takes one of each before a second of either.
    slices = [
        Slice(id=f"MIG-{unit}::{n}", gpu=0, unit=f"MIG-{unit}") for unit in "ab" for n in range(3)
    ]
    assert spread(slices, [], 2, pairs_link) == ["MIG-a::0", "MIG-b::0"]
    assert packed(slices, [], 2, pairs_link) == ["MIG-a::0", "MIG-a::1"]


def test_mig_devices_pack_onto_one_gpu() -> None:
    # a100-mig: GPU 0 holds two 1g.5gb devices, GPU 1 seven. Each device is its own unit.
    migs = [Slice(id=f"MIG-0-{n}", gpu=0, unit=f"MIG-0-{n}") for n in range(2)] + [
        Slice(id=f"MIG-1-{n}", gpu=1, unit=f"MIG-1-{n}") for n in range(7)
    ]
    assert packed(migs, [], 2, pairs_link) == ["MIG-0-0", "MIG-0-1"]
    assert packed(migs, [], 3, pairs_link) == ["MIG-1-0", "MIG-1-1", "MIG-1-2"]
    assert packed(migs, ["MIG-1-5"], 2, pairs_link) == ["MIG-1-0", "MIG-1-5"]


def test_answers_do_not_depend_on_input_order() -> None:
    slices = replicas({0: 2, 1: 3, 2: 4, 3: 1})
    for policy in ("spread", "packed"):
        assert choose(policy, slices, [], 3, pairs_link) == choose(
            policy, list(reversed(slices)), [], 3, pairs_link
        )


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown placement policy 'scatter'"):
        choose("scatter", replicas({0: 1}), [], 1, pairs_link)
