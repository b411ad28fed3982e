"""NVIDIA's pair score: pair tokens, their two facts, and the node's link matrix."""

from __future__ import annotations

import pytest

from accel_plugins.backends.nvidia.allocation.pair_score import (
    LEVEL_OF_PCIE,
    PCIE_OF_LEVEL,
    LinkMatrix,
    PairLink,
    link_score,
    parse_link,
)
from accel_plugins.backends.nvidia.discovery import discover
from accel_plugins.backends.nvidia.nvml import session
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from tests.fixtures.nvidia import profile


@pytest.mark.parametrize(
    ("token", "score"),
    [
        # go-gpuallocator besteffort_policy.go calculateGPUPairScore: the PCIe relation
        # and 100 per NVLink, summed.
        pytest.param("BOARD", 60, id="same-board"),
        pytest.param("PIX", 50, id="single-switch"),
        pytest.param("PXB", 40, id="multiple-switches"),
        pytest.param("PHB", 30, id="host-bridge"),
        pytest.param("NODE", 20, id="same-cpu"),
        pytest.param("SYS", 10, id="cross-cpu"),
        pytest.param("SOC", 10, id="soc-old-name-of-sys"),
        pytest.param("NV1+PIX", 150, id="nv1-under-one-switch"),
        pytest.param("NV1+PHB", 130, id="nv1-across-a-host-bridge"),
        pytest.param("NV2+SYS", 210, id="nv2-across-numa-nodes"),
        pytest.param("NV18+NODE", 1820, id="nv18"),
        pytest.param("NV12", 1200, id="bare-nvlink-relation-unknown"),
        pytest.param("?", 0, id="nothing-known"),
        pytest.param("X", 0, id="diagonal"),
        pytest.param("NV", 0, id="nv-without-count"),
        pytest.param("NVx", 0, id="nv-not-a-number"),
        pytest.param("NV0+PIX", 0, id="nv0"),
        pytest.param("PIX+NV1", 0, id="relation-first"),
        pytest.param("NV1+", 0, id="plus-without-relation"),
        pytest.param("", 0, id="empty"),
    ],
)
def test_pair_scores(token: str, score: int) -> None:
    assert link_score(token) == score


@pytest.mark.parametrize(
    ("link", "token"),
    [
        pytest.param(PairLink(2, "SYS"), "NV2+SYS", id="both"),
        pytest.param(PairLink(0, "PIX"), "PIX", id="no-nvlink"),
        pytest.param(PairLink(4, None), "NV4", id="relation-unknown"),
        pytest.param(PairLink(), "?", id="nothing"),
    ],
)
def test_tokens_round_trip(link: PairLink, token: str) -> None:
    assert link.token == token
    assert parse_link(token) == link


def test_nvml_levels_map_both_ways() -> None:
    # go-gpuallocator internal/links/device.go GetP2PLink: NVML's common ancestor levels.
    assert dict(PCIE_OF_LEVEL) == {
        0: "BOARD",
        10: "PIX",
        20: "PXB",
        30: "PHB",
        40: "NODE",
        50: "SYS",
    }
    assert all(PCIE_OF_LEVEL[LEVEL_OF_PCIE[r]] == r for r in LEVEL_OF_PCIE)


def test_matrix_is_symmetric_and_addressed_by_gpu_index() -> None:
    # GPU 1 was lost at discovery: rows name peers 0, 2, 5 by index.
    matrix = LinkMatrix(
        {
            0: (("X", "NV4+SYS", "SYS"), (0, 2, 5)),
            2: (("NV4+SYS", "X", "PIX"), (0, 2, 5)),
            5: (("SYS", "PHB", "X"), (0, 2, 5)),  # disagrees with GPU 2's PIX: the better wins
        }
    )
    assert matrix.gpus == (0, 2, 5)
    assert [[matrix.score(a, b) for b in (0, 2, 5)] for a in (0, 2, 5)] == [
        [0, 410, 10],
        [410, 0, 50],
        [10, 50, 0],
    ]
    assert matrix.score(0, 1) == 0
    assert 1 not in matrix
    assert 2 in matrix
    assert matrix.choose([0, 2, 5], [], 2) == [0, 2]
    with pytest.raises(ValueError, match="GPU 1 is not in the link matrix"):
        matrix.choose([0, 1], [], 1)


def test_matrix_of_a_discovered_node_scores_nvidia_pairs() -> None:
    nvml = SimulatedNvml(profile("pcie-8gpu-nvlink-pairs"))
    with session(nvml):
        node = discover(nvml)
    matrix = LinkMatrix.from_gpus(node.gpus)
    # An NV12 bridge on one PCIe switch, switch mates, across NUMA nodes.
    assert (matrix.score(0, 1), matrix.score(1, 2), matrix.score(3, 4)) == (1250, 50, 10)
    assert matrix.partitioner.numa == (0, 0, 0, 0, 1, 1, 1, 1)


def test_nvswitch_pairs_score_their_pcie_relation_only() -> None:
    nvml = SimulatedNvml(profile("dgx-h100"))
    with session(nvml):
        node = discover(nvml)
    matrix = LinkMatrix.from_gpus(node.gpus)
    assert {matrix.score(0, j) for j in (1, 2, 3)} == {20}
    assert {matrix.score(0, j) for j in (4, 5, 6, 7)} == {10}
