"""NUMA topology hints, the Topology Manager's policies and the device manager's device choice.

The tables of ``TestGetTopologyHints`` (getCommonTestCases),
``TestTopologyAlignedAllocation`` and ``TestGetPreferredAllocationParameters``
come from the kubelet's ``pkg/kubelet/cm/devicemanager/topology_hints_test.go``,
case for case under the kubelet's names, on its two NUMA nodes. The merge
table is ours, one case per rule of ``topologymanager/policy.go`` and the
policy files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from accel_plugins.kubelet_emulator.admission import DeviceAllocationError, devices_to_allocate
from accel_plugins.kubelet_emulator.model import DeviceState
from accel_plugins.kubelet_emulator.topology import (
    BEST_EFFORT,
    NONE,
    RESTRICTED,
    SINGLE_NUMA_NODE,
    TopologyHint,
    machine_numa_nodes,
    merge,
    resource_hints,
)

NUMA = [0, 1]
H = TopologyHint.of


def numa(device_id: str, node: int) -> DeviceState:
    return DeviceState(device_id, numa_nodes=(node,))


def plain(device_id: str) -> DeviceState:
    return DeviceState(device_id)


# -- TestGetTopologyHints ------------------------------------------------------------------


@dataclass
class HintCase:
    request: dict[str, int]
    devices: dict[str, list[DeviceState]]
    expected: dict[str, list[TopologyHint] | None]
    # resource -> device IDs held by the container itself / by another container of the pod
    own: dict[str, list[str]] = field(default_factory=dict)
    others: dict[str, list[str]] = field(default_factory=dict)


FOUR_ACROSS = [numa("Dev1", 0), numa("Dev2", 1), numa("Dev3", 0), numa("Dev4", 1)]
FOUR_PAIRED = [numa("Dev1", 0), numa("Dev2", 0), numa("Dev3", 1), numa("Dev4", 1)]

HINT_CASES = {
    "Single Request, no alignment": HintCase(
        {"testdevice": 1},
        # Dev3 has an empty node list, Dev4 a nil one: neither counts as topology.
        {"testdevice": [plain("Dev1"), plain("Dev2"), plain("Dev3"), plain("Dev4")]},
        {"testdevice": None},
    ),
    "Single Request, only one with alignment": HintCase(
        {"testdevice": 1},
        {"testdevice": [plain("Dev1"), numa("Dev2", 1)]},
        {"testdevice": [H(1), H(0, 1, preferred=False)]},
    ),
    "Single Request, one device per socket": HintCase(
        {"testdevice": 1},
        {"testdevice": [numa("Dev1", 0), numa("Dev2", 1)]},
        {"testdevice": [H(0), H(1), H(0, 1, preferred=False)]},
    ),
    "Request for 2, one device per socket": HintCase(
        {"testdevice": 2},
        {"testdevice": [numa("Dev1", 0), numa("Dev2", 1)]},
        {"testdevice": [H(0, 1)]},
    ),
    "Request for 2, 2 devices per socket": HintCase(
        {"testdevice": 2},
        {"testdevice": FOUR_ACROSS},
        {"testdevice": [H(0), H(1), H(0, 1, preferred=False)]},
    ),
    "Request for 2, optimal on 1 NUMA node, forced cross-NUMA": HintCase(
        {"testdevice": 2},
        {"testdevice": FOUR_ACROSS},
        {"testdevice": [H(0, 1, preferred=False)]},
        others={"testdevice": ["Dev1", "Dev2"]},
    ),
    "2 device types, mixed configuration": HintCase(
        {"testdevice1": 2, "testdevice2": 1},
        {"testdevice1": FOUR_ACROSS, "testdevice2": [numa("Dev1", 0)]},
        {
            "testdevice1": [H(0), H(1), H(0, 1, preferred=False)],
            "testdevice2": [H(0), H(0, 1, preferred=False)],
        },
    ),
    "Single device type, more requested than available": HintCase(
        {"testdevice": 6}, {"testdevice": FOUR_PAIRED}, {"testdevice": []}
    ),
    "Single device type, all already allocated to container": HintCase(
        {"testdevice": 2},
        {"testdevice": [numa("Dev1", 0), numa("Dev2", 0)]},
        {"testdevice": [H(0), H(0, 1, preferred=False)]},
        own={"testdevice": ["Dev1", "Dev2"]},
    ),
    "Single device type, less already allocated to container than requested": HintCase(
        {"testdevice": 4},
        {"testdevice": FOUR_PAIRED},
        {"testdevice": []},
        own={"testdevice": ["Dev1", "Dev2"]},
    ),
    "Single device type, more already allocated to container than requested": HintCase(
        {"testdevice": 2},
        {"testdevice": FOUR_PAIRED},
        {"testdevice": []},
        own={"testdevice": ["Dev1", "Dev2", "Dev3", "Dev4"]},
    ),
}


@pytest.mark.parametrize("case", HINT_CASES.values(), ids=HINT_CASES.keys())
def test_get_topology_hints(case: HintCase) -> None:
    for resource, count in case.request.items():
        devices = {d.id: d for d in case.devices[resource]}
        own = case.own.get(resource, [])
        in_use = set(own) | set(case.others.get(resource, []))
        available = [d for d in devices if d not in in_use]

        hints = resource_hints(devices, NUMA, count, available, allocated=own)

        assert hints == case.expected[resource]


def test_hints_count_reusable_devices_and_drop_masks_without_them() -> None:
    # An init container holds Dev1 (node 0); the app container may reuse it, so a mask
    # without node 0 cannot hold the request.
    devices = {d.id: d for d in FOUR_ACROSS}
    hints = resource_hints(devices, NUMA, 2, available=["Dev2", "Dev4"], reusable=["Dev1"])
    assert hints == [H(0, 1, preferred=False)]
    assert resource_hints(devices, NUMA, 1, available=[], reusable=["Dev1"]) == [
        H(0),
        H(0, 1, preferred=False),
    ]


# -- policies ------------------------------------------------------------------------------

MERGE_CASES = {
    # policy, hints per resource, the best hint, admitted
    "none admits without hints": (NONE, {"r": []}, TopologyHint(None, True), True),
    "no device resources: any node, preferred": (
        RESTRICTED,
        {},
        TopologyHint(frozenset({0, 1}), True),
        True,
    ),
    "the narrowest preferred hint wins": (
        BEST_EFFORT,
        {"r": [H(0), H(1), H(0, 1, preferred=False)]},
        H(0),
        True,
    ),
    "two resources meet on a common node": (
        RESTRICTED,
        {"a": [H(0), H(1), H(0, 1, preferred=False)], "b": [H(1), H(0, 1, preferred=False)]},
        H(1),
        True,
    ),
    "different preferred nodes make the merge not preferred": (
        RESTRICTED,
        {"a": [H(0)], "b": [H(1)]},
        TopologyHint(frozenset({0, 1}), False),
        False,
    ),
    "best-effort admits a non-preferred hint": (
        BEST_EFFORT,
        {"r": [H(0, 1, preferred=False)]},
        H(0, 1, preferred=False),
        True,
    ),
    "restricted refuses a non-preferred hint": (
        RESTRICTED,
        {"r": [H(0, 1, preferred=False)]},
        H(0, 1, preferred=False),
        False,
    ),
    "restricted refuses an unsatisfiable request": (
        RESTRICTED,
        {"r": []},
        TopologyHint(frozenset({0, 1}), False),
        False,
    ),
    "no preference is preferred": (RESTRICTED, {"r": None}, H(0, 1), True),
    "single-numa-node admits one node": (
        SINGLE_NUMA_NODE,
        {"r": [H(0), H(1), H(0, 1, preferred=False)]},
        H(0),
        True,
    ),
    "single-numa-node refuses a request spanning nodes": (
        SINGLE_NUMA_NODE,
        {"r": [H(0, 1)]},
        TopologyHint(None, False),
        False,
    ),
    "single-numa-node: no preference becomes any node": (
        SINGLE_NUMA_NODE,
        {"r": None},
        TopologyHint(None, True),
        True,
    ),
}


@pytest.mark.parametrize(
    ("policy", "hints", "best", "admit"), MERGE_CASES.values(), ids=MERGE_CASES.keys()
)
def test_merge(
    policy: str,
    hints: dict[str, list[TopologyHint] | None],
    best: TopologyHint,
    admit: bool,
) -> None:
    assert merge(policy, NUMA, hints) == (best, admit)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown topology policy 'static'"):
        merge("static", NUMA, {})


def test_machine_numa_nodes_come_from_sysfs(tmp_path: Path) -> None:
    root = tmp_path
    nodes = root / "devices" / "system" / "node"
    for name in ("node0", "node3", "online", "has_cpu"):
        (nodes / name).mkdir(parents=True)
    assert machine_numa_nodes(root) == [0, 3]
    assert machine_numa_nodes(root / "missing") == [0]


# -- TestTopologyAlignedAllocation ---------------------------------------------------------


def spread(first: int, last: int, node: int) -> list[DeviceState]:
    return [numa(f"Dev{i}", node) for i in range(first, last)]


Preferred = list[str] | None


@dataclass
class AlignedCase:
    request: int
    devices: list[DeviceState]
    hint: TopologyHint
    alignment: dict[int, int]
    answer: Preferred = None  # the plugin's GetPreferredAllocation answer, None: not advertised
    expected_preferred: list[str] = field(default_factory=list)


SIX = [numa(f"Dev{i}", (i - 1) % 2) for i in range(1, 7)]
ALIGNED_CASES = {
    "Single Request, no alignment": AlignedCase(1, [plain("Dev1"), plain("Dev2")], H(0, 1), {}),
    "Request for 1, partial alignment": AlignedCase(
        1, [plain("Dev1"), numa("Dev2", 1)], H(1), {1: 1}
    ),
    "Single Request, socket 0": AlignedCase(1, [numa("Dev1", 0), numa("Dev2", 1)], H(0), {0: 1}),
    "Single Request, socket 1": AlignedCase(1, [numa("Dev1", 0), numa("Dev2", 1)], H(1), {1: 1}),
    "Request for 2, socket 0": AlignedCase(2, FOUR_ACROSS, H(0), {0: 2}),
    "Request for 2, socket 1": AlignedCase(2, FOUR_ACROSS, H(1), {1: 2}),
    "Request for 4, unsatisfiable, prefer socket 0": AlignedCase(4, SIX, H(0), {0: 3, 1: 1}),
    "Request for 4, unsatisfiable, prefer socket 1": AlignedCase(4, SIX, H(1), {0: 1, 1: 3}),
    "Request for 4, multisocket": AlignedCase(
        4, [numa(f"Dev{i}", (i - 1) % 4) for i in range(1, 9)], H(1, 3), {1: 2, 3: 2}
    ),
    "Request for 5, socket 0, preferred aligned accepted": AlignedCase(
        5,
        spread(0, 100, 0) + spread(100, 200, 1),
        H(0),
        {0: 5},
        ["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"],
        ["Dev0", "Dev19", "Dev83", "Dev42", "Dev77"],
    ),
    "Request for 5, socket 0, preferred aligned accepted, unaligned ignored": AlignedCase(
        5,
        spread(0, 100, 0) + spread(100, 200, 1),
        H(0),
        {0: 5},
        ["Dev0", "Dev19", "Dev83", "Dev150", "Dev186"],
        ["Dev0", "Dev19", "Dev83"],
    ),
    "Request for 5, socket 1, preferred aligned accepted, bogus ignored": AlignedCase(
        5,
        spread(0, 100, 1),
        H(1),
        {1: 5},
        ["Dev0", "Dev19", "Dev83", "bogus0", "bogus1"],
        ["Dev0", "Dev19", "Dev83"],
    ),
    "Request for 5, multisocket, preferred accepted": AlignedCase(
        5,
        spread(0, 3, 0) + spread(3, 100, 1),
        H(0),
        {0: 3, 1: 2},
        ["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"],
        ["Dev0", "Dev1", "Dev2", "Dev42", "Dev83"],
    ),
    "Request for 5, multisocket, preferred unaligned accepted, bogus ignored": AlignedCase(
        5,
        spread(0, 3, 0) + spread(3, 100, 1),
        H(0),
        {0: 3, 1: 2},
        ["Dev0", "Dev1", "Dev2", "Dev42", "bogus0"],
        ["Dev0", "Dev1", "Dev2", "Dev42"],
    ),
}


@pytest.mark.parametrize("case", ALIGNED_CASES.values(), ids=ALIGNED_CASES.keys())
async def test_topology_aligned_allocation(case: AlignedCase) -> None:
    devices = {d.id: d for d in case.devices}
    answer = case.answer

    async def preferred(available: list[str], must: list[str], size: int) -> list[str]:
        assert answer is not None
        return answer

    choice = await devices_to_allocate(
        "resource",
        devices,
        set(),
        set(),
        case.request,
        case.hint,
        preferred if answer is not None else None,
    )

    assert len(choice.device_ids) == case.request
    assert set(case.expected_preferred) <= set(choice.device_ids)
    alignment: dict[int, int] = {}
    for device_id in choice.device_ids:
        for node in devices[device_id].numa_nodes[:1]:
            alignment[node] = alignment.get(node, 0) + 1
    assert alignment == case.alignment


# -- TestGetPreferredAllocationParameters --------------------------------------------------


@dataclass
class ParameterCase:
    request: int
    devices: list[DeviceState]
    allocated: list[str]
    reusable: list[str]
    available: list[str]
    must_include: list[str]
    size: int


EIGHT_ON_0 = spread(0, 8, 0)
FOUR_AND_FOUR = spread(0, 4, 0) + spread(4, 8, 1)
ALL_EIGHT = [f"Dev{i}" for i in range(8)]
PARAMETER_CASES = {
    "Request for 1, socket 0, 0 already allocated, 0 reusable": ParameterCase(
        1, spread(0, 4, 0), [], [], ["Dev0", "Dev1", "Dev2", "Dev3"], [], 1
    ),
    "Request for 4, socket 0, 2 already allocated, 2 reusable": ParameterCase(
        4, EIGHT_ON_0, ["Dev0", "Dev5"], ["Dev0", "Dev5"], ALL_EIGHT, ["Dev0", "Dev5"], 4
    ),
    "Request for 4, socket 0, 4 already allocated, 2 reusable": ParameterCase(
        4,
        EIGHT_ON_0,
        ["Dev0", "Dev5", "Dev4", "Dev1"],
        ["Dev0", "Dev5"],
        ["Dev0", "Dev2", "Dev3", "Dev5", "Dev6", "Dev7"],
        ["Dev0", "Dev5"],
        4,
    ),
    "Request for 6, multisocket, 2 already allocated, 2 reusable": ParameterCase(
        6,
        FOUR_AND_FOUR,
        ["Dev1", "Dev6"],
        ["Dev1", "Dev6"],
        ALL_EIGHT,
        ["Dev0", "Dev1", "Dev2", "Dev3", "Dev6"],
        6,
    ),
    "Request for 6, multisocket, 4 already allocated, 2 reusable": ParameterCase(
        6,
        FOUR_AND_FOUR,
        ["Dev0", "Dev1", "Dev6", "Dev7"],
        ["Dev1", "Dev6"],
        ["Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6"],
        ["Dev1", "Dev2", "Dev3", "Dev6"],
        6,
    ),
}


@pytest.mark.parametrize("case", PARAMETER_CASES.values(), ids=PARAMETER_CASES.keys())
async def test_get_preferred_allocation_parameters(case: ParameterCase) -> None:
    # The kubelet's own test compares `available` twice and never checks must-include;
    # the table's must-include column is checked here.
    asked: list[tuple[list[str], list[str], int]] = []

    async def preferred(available: list[str], must: list[str], size: int) -> list[str]:
        asked.append((available, must, size))
        return []

    await devices_to_allocate(
        "resource",
        {d.id: d for d in case.devices},
        set(case.allocated),
        set(case.reusable),
        case.request,
        H(0),
        preferred,
    )

    [(available, must, size)] = asked
    assert set(available) == set(case.available)
    assert set(must) == set(case.must_include)
    assert size == case.size


# -- device manager errors, in the kubelet's words -----------------------------------------

ERROR_CASES = {
    "no healthy device": (
        [DeviceState("w0", "Unhealthy")],
        set(),
        1,
        "no healthy devices present; cannot allocate unhealthy devices r",
    ),
    "too few available": (
        [plain("w0"), plain("w1")],
        {"w0"},
        2,
        "requested number of devices unavailable for r. Requested: 2, Available: 1",
    ),
}


@pytest.mark.parametrize(
    ("devices", "in_use", "count", "message"), ERROR_CASES.values(), ids=ERROR_CASES.keys()
)
async def test_device_manager_errors(
    devices: list[DeviceState], in_use: set[str], count: int, message: str
) -> None:
    with pytest.raises(DeviceAllocationError) as raised:
        await devices_to_allocate("r", {d.id: d for d in devices}, in_use, set(), count, None)
    assert str(raised.value) == message
