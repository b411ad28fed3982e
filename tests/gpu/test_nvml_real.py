"""The pynvml adapter against a real GPU and driver; skipped where there is none.

Run on a GPU machine with ``pytest tests/gpu``. The checks hold on any NVIDIA
GPU: they compare the adapter's answers with facts NVML must satisfy, not
with a particular model.
"""

from __future__ import annotations

import re

import pytest

from accel_plugins.backends.nvidia.allocation.pair_score import parse_link
from accel_plugins.backends.nvidia.discovery import Node, discover
from accel_plugins.backends.nvidia.nvml import Pynvml, session
from accel_plugins.backends.nvidia.resources import build_resources


@pytest.fixture(scope="module")
def node(nvml: Pynvml) -> Node:
    return discover(nvml)


def test_every_gpu_is_described(node: Node) -> None:
    assert node.gpus
    for gpu in node.gpus:
        assert re.match(r"^GPU-[0-9a-f-]{36}$", gpu.uuid), gpu.uuid
        assert gpu.name
        assert gpu.memory_mib > 0
        assert re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", gpu.pci_bus_id)
        assert gpu.numa_node is None or gpu.numa_node >= 0
    assert len({g.uuid for g in node.gpus}) == len(node.gpus)
    assert len({g.minor for g in node.gpus}) == len(node.gpus)


def test_link_matrix_is_square_symmetric_with_x_on_the_diagonal(node: Node) -> None:
    n = len(node.gpus)
    rows = [g.links for g in node.gpus]
    assert all(len(row) == n for row in rows)
    for i in range(n):
        for j in range(n):
            # A pair token: direct NVLinks and the PCIe relation (both known on real GPUs).
            link = parse_link(rows[i][j])
            assert (rows[i][j] == "X") == (i == j)
            assert i == j or (link is not None and link.pcie is not None), rows[i][j]
            assert rows[i][j] == rows[j][i]


def test_mig_devices_are_consistent(node: Node) -> None:
    for gpu in node.gpus:
        if not gpu.mig_enabled:
            assert gpu.migs == ()
        for mig in gpu.migs:
            assert mig.uuid.startswith("MIG-")
            assert mig.index.startswith(f"{gpu.index}:")
            assert re.match(r"^(\d+c\.)?\d+g\.\d+gb", mig.profile), mig.profile
            assert 0 < mig.memory_mib <= gpu.memory_mib


def test_mixed_strategy_offers_every_gpu_or_mig_device(node: Node) -> None:
    resources = build_resources(node, "mixed")
    offered = sum(len(devices) for devices in resources.values())
    expected = sum(len(g.migs) if g.mig_enabled else 1 for g in node.gpus)
    assert offered == expected


def test_event_set_registers_and_times_out_quietly(nvml: Pynvml, node: Node) -> None:
    events = nvml.create_event_set()
    try:
        for gpu in node.gpus:
            events.register(nvml.device_handle(gpu.index))
        # A healthy idle GPU reports nothing; a critical XID here would be news.
        event = events.wait(100)
        assert event is None or event.xid > 0
    finally:
        events.free()


def test_a_second_session_nests_inside_the_first(nvml: Pynvml) -> None:
    # NVML counts inits; an inner session must leave the outer one working.
    adapter = Pynvml()
    with session(adapter):
        assert adapter.device_count() >= 1
    assert nvml.device_count() >= 1
