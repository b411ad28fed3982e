"""GetPreferredAllocation for NVIDIA resources: which policy answers which devices.

- Whole GPUs only: NVIDIA's best-effort optimum over the pair scores
  (:mod:`.pair_score`), found exactly by :mod:`.best_effort_search`, with
  its ties broken to keep NVLink pairs and quads whole, then one NUMA node.
- Any time-sliced replica among the devices: the configured replica policy,
  ``spread`` (default) or ``packed`` (:mod:`.replica_policy`).
- MIG devices: ``packed``, so one request stays on as few GPUs as it can.
- Devices the link matrix does not know (it was built before they existed):
  the framework's default, fewest NUMA nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from accel_plugins.backends.nvidia.allocation.pair_score import LinkMatrix
from accel_plugins.backends.nvidia.allocation.replica_policy import PACKED, Slice
from accel_plugins.backends.nvidia.allocation.replica_policy import choose as choose_slices
from accel_plugins.backends.nvidia.facts import gpu_facts, known_gpu
from accel_plugins.plugin.allocation import prefer_fewest_numa_nodes
from accel_plugins.plugin.device import Device


def _slice(device: Device, gpu: int) -> Slice:
    facts = gpu_facts(device)
    # "3" for a GPU, "3:1" for a MIG device, then the replica number.
    order = [int(part) for part in facts.index.split(":") if part.isdigit()]
    if facts.replica is not None:
        order.append(facts.replica)
    return Slice(id=device.id, gpu=gpu, unit=facts.replica_of or device.id, order=tuple(order))


def preferred_devices(
    matrix: LinkMatrix | None,
    available: Sequence[Device],
    must_include: Sequence[Device],
    size: int,
    *,
    replica_policy: str,
) -> list[str]:
    """``size`` device IDs from ``available`` holding ``must_include``.

    The request must already be valid (see ``check_preferred_request``).
    """
    if matrix is None:
        return prefer_fewest_numa_nodes(available, must_include, size)
    gpu_of: dict[str, int] = {}
    for device in available:
        facts = known_gpu(device)
        index = None if facts is None else facts.gpu_index
        if index is None or index not in matrix:
            return prefer_fewest_numa_nodes(available, must_include, size)
        gpu_of[device.id] = index
    must = [d.id for d in must_include]
    whole = all(gpu_facts(d).is_whole_gpu for d in available)
    if whole and len(set(gpu_of.values())) == len(gpu_of):
        by_gpu = {gpu: device_id for device_id, gpu in gpu_of.items()}
        chosen = matrix.choose(by_gpu, [gpu_of[i] for i in must], size)
        return [by_gpu[g] for g in chosen]
    slices = [_slice(d, gpu_of[d.id]) for d in available]
    policy = replica_policy if any(gpu_facts(d).is_replica for d in available) else PACKED
    return choose_slices(policy, slices, must, size, matrix.score)
