"""MIG strategies none, single and mixed, as NVIDIA's plugin defines them."""

from __future__ import annotations

from typing import Any

import pytest

from accel_plugins.backends.nvidia.discovery import Node, discover
from accel_plugins.backends.nvidia.facts import GpuFacts, gpu_facts
from accel_plugins.backends.nvidia.nvml import session
from accel_plugins.backends.nvidia.resources import MigStrategyError, build_resources
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from tests.fixtures.nvidia import profile


def node_of(spec: str | dict[str, Any]) -> Node:
    nvml = SimulatedNvml(profile(spec))
    with session(nvml):
        return discover(nvml)


def a100(*migs: list[str] | None) -> dict[str, Any]:
    """A node of A100-40GB GPUs; None is a GPU with MIG off."""
    return {
        "gpus": [
            {"name": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960, "numaNode": 0}
            | ({} if m is None else {"mig": m})
            for m in migs
        ]
    }


def shape(resources: dict[str, list[Any]]) -> dict[str, list[str]]:
    """Resource -> the devices' NVIDIA indices, the readable form of a tree."""
    return {name: [gpu_facts(d).index for d in devices] for name, devices in resources.items()}


@pytest.mark.parametrize(
    ("spec", "strategy", "expected"),
    [
        pytest.param(
            "pcie-4gpu", "none", {"nvidia.com/gpu": ["0", "1", "2", "3"]}, id="none-no-mig"
        ),
        pytest.param(
            "a100-mig",
            "none",
            {"nvidia.com/gpu": ["0", "1", "2", "3"]},
            id="none-ignores-mig-mode",
        ),
        pytest.param(
            "pcie-4gpu", "single", {"nvidia.com/gpu": ["0", "1", "2", "3"]}, id="single-no-mig"
        ),
        pytest.param(
            a100(["1g.5gb"] * 2, ["1g.5gb"] * 3),
            "single",
            {"nvidia.com/gpu": ["0:0", "0:1", "1:0", "1:1", "1:2"]},
            id="single-one-profile",
        ),
        pytest.param(
            "pcie-4gpu", "mixed", {"nvidia.com/gpu": ["0", "1", "2", "3"]}, id="mixed-no-mig"
        ),
        pytest.param(
            "a100-mig",
            "mixed",
            {
                "nvidia.com/mig-3g.20gb": ["0:0"],
                "nvidia.com/mig-2g.10gb": ["0:1"],
                "nvidia.com/mig-1g.5gb": ["0:2", "0:3", *(f"1:{i}" for i in range(7))],
                "nvidia.com/mig-7g.40gb": ["2:0"],
                "nvidia.com/gpu": ["3"],
            },
            id="mixed-profiles-and-a-full-gpu",
        ),
        pytest.param(
            a100([], None),
            "mixed",
            {"nvidia.com/gpu": ["1"]},
            id="mixed-mig-gpu-without-devices-offers-nothing",
        ),
    ],
)
def test_mig_strategies(
    spec: str | dict[str, Any], strategy: str, expected: dict[str, list[str]]
) -> None:
    got = shape(build_resources(node_of(spec), strategy))
    assert got == expected
    assert list(got) == list(expected)  # resources appear in discovery order


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(a100(["1g.5gb"], None), "GPUs 1 have it off", id="mig-on-some-gpus"),
        pytest.param(a100(["1g.5gb"], ["2g.10gb"]), "found 1g.5gb, 2g.10gb", id="two-profiles"),
        pytest.param(a100([], ["1g.5gb"]), "no MIG devices are configured", id="empty-mig"),
        pytest.param("a100-mig", "use --mig-strategy=mixed", id="builtin-mixed-node"),
    ],
)
def test_single_strategy_refuses_mixed_nodes(spec: str | dict[str, Any], message: str) -> None:
    with pytest.raises(MigStrategyError, match=message):
        build_resources(node_of(spec), "single")


def test_device_facts_carry_what_allocation_and_the_optimiser_read() -> None:
    resources = build_resources(node_of("a100-mig"), "mixed")
    gpu = resources["nvidia.com/gpu"][0]
    assert gpu.id.startswith("GPU-")
    assert gpu.numa_nodes == (1,)
    assert gpu.facts == GpuFacts(
        kind="gpu",
        index="3",
        gpu_index=3,
        uuid=gpu.id,
        minor=3,
        name="NVIDIA A100-SXM4-40GB",
        memory_mib=40960,
        pci_bus_id="0000:4e:00.0",
        numa_node=1,
        links=("NV4+SYS", "NV4+SYS", "NV4+NODE", "X"),
        link_peers=(0, 1, 2, 3),
        brand=14,  # NVML_BRAND_NVIDIA, as the simulated GPUs report
    )
    mig = resources["nvidia.com/mig-3g.20gb"][0]
    assert mig.id.startswith("MIG-")
    assert gpu_facts(mig).parent_uuid != gpu.id
    assert {
        k: getattr(gpu_facts(mig), k)
        for k in ("kind", "index", "mig_profile", "gpu_index", "minor", "brand")
    } == {
        "brand": 14,  # the parent's
        "kind": "mig",
        "index": "0:0",
        "mig_profile": "3g.20gb",
        "gpu_index": 0,
        "minor": 0,
    }
    assert gpu_facts(mig).links == ("X", "NV4+NODE", "NV4+SYS", "NV4+SYS")


def test_unknown_strategy_is_an_error() -> None:
    with pytest.raises(MigStrategyError, match="unknown MIG strategy"):
        build_resources(node_of("pcie-4gpu"), "some")
