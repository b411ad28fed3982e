"""The NUMA-then-groups policy the generic backend answers GetPreferredAllocation with."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel_plugins.backends.generic.discovery import UnitFacts
from accel_plugins.plugin.allocation import prefer_fewest_numa_nodes
from accel_plugins.plugin.device import Device, Health


def dev(name: str, group: int, *numa: int, replica: int = 0, healthy: bool = True) -> Device:
    return Device(
        name,
        Health.HEALTHY if healthy else Health.UNHEALTHY,
        numa_nodes=numa,
        facts=UnitFacts(group=group, replica=replica),
    )


def group_of(device: Device) -> Hashable:
    return device.facts_as(UnitFacts).group


def choose(available: Sequence[Device], must: Sequence[str], size: int) -> list[str]:
    by_id = {d.id: d for d in available}
    return prefer_fewest_numa_nodes(available, [by_id[m] for m in must], size, group_of=group_of)


# A two-socket box: on node 0 a group of four (a*) and a pair (b*); on node 1 a trio (c*).
BOX = [
    *(dev(f"a{i}", 0, 0) for i in range(4)),
    *(dev(f"b{i}", 1, 0) for i in range(2)),
    *(dev(f"c{i}", 2, 1) for i in range(3)),
]


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        pytest.param(BOX, [], 2, ["b0", "b1"], id="pair-fits-exactly-quad-stays-whole"),
        pytest.param(BOX, [], 1, ["b0"], id="single-from-smallest-group"),
        pytest.param(BOX, [], 3, ["a0", "a1", "a2"], id="trio-from-quad-on-node-0"),
        pytest.param(BOX, [], 4, ["a0", "a1", "a2", "a3"], id="quad-whole"),
        pytest.param(
            BOX, [], 5, ["a0", "a1", "a2", "a3", "b0"], id="five-largest-group-then-best-fit"
        ),
        pytest.param(BOX, ["a3"], 2, ["a0", "a3"], id="must-include-group-used-first"),
        pytest.param(BOX, ["c0"], 2, ["c0", "c1"], id="must-include-keeps-its-numa-node"),
        pytest.param(
            [d for d in BOX if d.id not in ("a0", "a1", "a2")],
            [],
            1,
            ["a3"],
            id="broken-group-before-whole-pair",
        ),
        pytest.param(
            [dev("x0", 0, 0), dev("y0", 1, 1), dev("y1", 1, 1)],
            [],
            2,
            ["y0", "y1"],
            id="numa-before-groups",
        ),
        pytest.param(
            [dev("x0", 0, 0, healthy=False), dev("x1", 1, 0)],
            [],
            1,
            ["x1"],
            id="healthy-first",
        ),
    ],
)
def test_groups_stay_whole(
    available: list[Device], must: list[str], size: int, expected: list[str]
) -> None:
    assert choose(available, must, size) == expected
    assert choose(list(reversed(available)), must, size) == expected


def test_generic_units_before_second_replicas() -> None:
    # Two units offered twice each: a 2-device request gets two different units.
    devices = [dev(f"r{r}u{u}", 0, 0, replica=r) for u in range(2) for r in range(2)]

    def units_first(d: Device) -> tuple[int, str]:
        return (d.facts_as(UnitFacts).replica, d.id)

    answer = prefer_fewest_numa_nodes(devices, [], 2, group_of=group_of, order=units_first)
    assert answer == ["r0u0", "r0u1"]


@st.composite
def scenes(draw: st.DrawFn) -> tuple[list[Device], list[str], int]:
    count = draw(st.integers(1, 8))
    devices = [dev(f"d{i}", draw(st.integers(0, 3)), draw(st.integers(0, 2))) for i in range(count)]
    size = draw(st.integers(1, count))
    must = draw(st.lists(st.sampled_from([d.id for d in devices]), max_size=size, unique=True))
    return devices, must, size


def extra_nodes(ids: Sequence[str], by_id: dict[str, Device], must: Sequence[str]) -> int:
    base = {n for m in must for n in by_id[m].numa_nodes}
    return len({n for i in ids for n in by_id[i].numa_nodes} - base)


@settings(max_examples=300, deadline=None)
@given(scenes())
def test_fewest_numa_nodes_then_fewest_groups(scene: tuple[list[Device], list[str], int]) -> None:
    devices, must, size = scene
    by_id = {d.id: d for d in devices}
    answer = choose(devices, must, size)
    assert len(answer) == size == len(set(answer))
    assert set(must) <= set(answer)
    others = [d.id for d in devices if d.id not in must]
    options = [[*must, *extra] for extra in itertools.combinations(others, size - len(must))]
    fewest_nodes = min(extra_nodes(o, by_id, must) for o in options)
    assert extra_nodes(answer, by_id, must) == fewest_nodes
    # Among the choices inside the same NUMA nodes, none opens fewer new groups.
    nodes = {n for i in answer for n in by_id[i].numa_nodes}
    opened = {by_id[m].facts_as(UnitFacts).group for m in must}

    def new_groups(ids: Sequence[str]) -> int:
        return len({by_id[i].facts_as(UnitFacts).group for i in ids} - opened)

    same_nodes = [o for o in options if {n for i in o for n in by_id[i].numa_nodes} <= nodes]
    assert new_groups(answer) == min(new_groups(o) for o in same_nodes)
