"""Topology-aware preferred allocation seen from the kubelet emulator.

The emulator allocates as the kubelet does: GetPreferredAllocation over the
free healthy devices, then Allocate with the answer. Real sockets and gRPC;
only the GPUs are simulated.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from accel_plugins.backends.nvidia.config.config import share_all
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.allocation import prefer_fewest_numa_nodes
from tests.fixtures.framework import StartManager
from tests.fixtures.nvidia import simulated_backend

GPU = "nvidia.com/gpu"
STEPS = 80


def partner(gpu: int) -> int:
    """pcie-8gpu-nvlink-pairs bridges GPUs 0-1, 2-3, 4-5 and 6-7."""
    return gpu ^ 1


async def test_random_pods_never_break_a_free_nvlink_pair_needlessly(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    backend, nvml = simulated_backend("pcie-8gpu-nvlink-pairs")
    await start_manager(backend)
    await kubelet.wait_for_resource(GPU, allocatable=8)
    index = {g.uuid: i for i, g in enumerate(nvml.profile.gpus)}
    devices = {index[d.id]: d for d in backend.snapshot()[GPU].values()}
    rng = random.Random(5)
    held: dict[str, set[int]] = {}
    checked = {"lone-gpu": 0, "linked-pair": 0}
    default_broke = 0  # what the framework's NUMA-only policy would have done
    for step in range(STEPS):
        free = set(range(8)).difference(*held.values())
        size = rng.choice([1, 1, 2, 2, 4])
        if held and (size > len(free) or rng.random() < 0.35):
            pod = rng.choice(sorted(held))
            kubelet.release(pod)
            del held[pod]
            continue
        record = await kubelet.allocate(f"pod-{step}", "main", GPU, size)
        got = {index[u] for u in record.device_ids}
        assert len(got) == size
        assert got <= free
        lone = {g for g in free if partner(g) not in free}
        pairs = {frozenset((g, partner(g))) for g in free if partner(g) in free}
        default = prefer_fewest_numa_nodes([devices[g] for g in sorted(free)], [], size)
        chose = {index[u] for u in default}
        if size == 1 and lone:
            checked["lone-gpu"] += 1
            assert got <= lone, f"step {step}: took {got} from a free pair; lone GPUs {lone}"
            default_broke += not chose <= lone
        if size == 2 and pairs:
            checked["linked-pair"] += 1
            assert frozenset(got) in pairs, f"step {step}: {got} is not a free pair {pairs}"
            default_broke += frozenset(chose) not in pairs
        held[f"pod-{step}"] = got
    # The sequence really exercised both rules, and the NUMA-only default fails them.
    assert min(checked.values()) >= 5, checked
    assert default_broke > 0


@pytest.mark.parametrize(
    ("policy", "distinct_gpus"),
    [pytest.param("spread", 4, id="spread"), pytest.param("packed", 1, id="packed")],
)
async def test_time_sliced_replicas_follow_the_policy(
    kubelet: Kubelet, start_manager: StartManager, policy: str, distinct_gpus: int
) -> None:
    backend, _ = simulated_backend("dgx-h100", sharing=share_all(4))
    backend.settings = replace(backend.settings, replica_policy=policy)
    await start_manager(backend)
    await kubelet.wait_for_resource(GPU, allocatable=32)
    first = await kubelet.allocate("first", "main", GPU, 4)
    gpus = {d.split("::")[0] for d in first.device_ids}
    assert len(gpus) == distinct_gpus
    # A second pod: spread lands on GPUs the first left alone, packed on one more GPU.
    second = await kubelet.allocate("second", "main", GPU, 4)
    assert len({d.split("::")[0] for d in second.device_ids} & gpus) == 0


async def test_mig_devices_of_one_request_share_a_gpu(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    backend, _ = simulated_backend("a100-mig", mig_strategy="mixed", id_strategy="index")
    await start_manager(backend)
    resource = "nvidia.com/mig-1g.5gb"
    await kubelet.wait_for_resource(resource, allocatable=9)
    record = await kubelet.allocate("pod", "main", resource, 3)
    # GPU 1 is the only one with three 1g.5gb devices; index strategy names them 1:<n>.
    assert record.response.envs["NVIDIA_VISIBLE_DEVICES"] == "1:0,1:1,1:2"
