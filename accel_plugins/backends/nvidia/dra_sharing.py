"""A claim's ``GpuConfig`` sharing applied to the device-plugin path's container contract.

The devices a DRA claim gets are the same devices the device plugin serves:
whole GPUs, or the replicas the config file's ``sharing.timeSlicing`` and
``sharing.mps`` make. The contract starts from the device-plugin answer for
them (``NVIDIA_VISIBLE_DEVICES`` of the shared GPU; for MPS replicas the pipe
directory, its mount and ``/dev/shm``), and the claim's sharing settles what
it may add:

- ``TimeSlicing``: nothing; several claims (or pods of one claim) on one GPU
  already time-slice it. The ``Default`` interval only: NVIDIA's driver sets
  another one with ``nvidia-smi compute-policy``, which this driver does not
  run, and a claim is refused rather than given an interval it did not ask for.
  On MPS replicas it is refused: their clients go through the MPS daemon.
- ``MPS``: only on MPS replicas, whose control daemon the node runs (one per
  resource, limits per GPU from the config: ``mps_plan.py``). The claim's
  limits go to each client as the CUDA MPS client variables
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
  (``<ordinal>=<MiB>M`` per GPU, the ordinal being the GPU's place in the
  container's visible devices), so two claims on one GPU get their own limits
  from one daemon.

A claim holding a share of an MPS-shared GPU published once for several claims
(consumable capacity: ``k`` of its ``n`` shares, ``share_env``) gets ``k/n`` of it as
the same client limits: ``100·k/n`` percent of the threads (at least 1) and
``k/n`` of each GPU's memory pinned. Its own ``GpuConfig`` MPS limits win.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

from accel_plugins.backends.nvidia.container_contract import runtime_ids
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.gpu_config import (
    DEFAULT_INTERVAL,
    MPS,
    GpuSharing,
    MpsLimits,
    last_sharing,
)
from accel_plugins.plugin.device import ContainerAllocation, Device
from accel_plugins.plugin.dra_config import ClaimParameters, ClaimParametersError
from accel_plugins.plugin.dra_shares import Share
from accel_plugins.util.quantity import parse_quantity

MIB = 1 << 20

ACTIVE_THREAD_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
PINNED_MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


def pinned_limits(limits: MpsLimits, uuids: Sequence[str], where: str) -> dict[str, int]:
    """GPU UUID -> MiB: the default for every GPU, then the per-device entries (a UUID of
    the request, or an index into its GPUs)."""
    out = dict.fromkeys(uuids, limits.pinned_memory_mib) if limits.pinned_memory_mib else {}
    for key, mib in limits.per_device_mib.items():
        field = f"sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[{key}]"
        if key in uuids:
            out[key] = mib
        elif key.isdigit() and int(key) < len(uuids):
            out[uuids[int(key)]] = mib
        else:
            raise ClaimParametersError(
                where,
                field,
                f"invalid device: neither a GPU UUID of the request nor an index below "
                f"{len(uuids)}",
            )
    return {uuid: mib for uuid, mib in out.items() if mib is not None}


def mps_client_env(limits: MpsLimits, devices: Sequence[Device], where: str) -> dict[str, str]:
    """The CUDA MPS client variables for ``limits`` on these devices."""
    env: dict[str, str] = {}
    if limits.active_thread_percentage is not None:
        env[ACTIVE_THREAD_ENV] = str(limits.active_thread_percentage)
    uuids = runtime_ids(devices, "uuid")
    pinned = pinned_limits(limits, uuids, where)
    if pinned:
        env[PINNED_MEMORY_ENV] = ",".join(
            f"{ordinal}={pinned[uuid]}M" for ordinal, uuid in enumerate(uuids) if uuid in pinned
        )
    return env


def share_env(devices: Sequence[Device], share: Share) -> dict[str, str]:
    """The MPS client limits of ``share.shares`` of ``share.of`` shares of these GPUs: that
    part of the threads, and the ``memory`` the share consumed pinned (else that part)."""
    part = min(share.shares, share.of)
    memory = {gpu_facts(d).gpu_uuid: gpu_facts(d).memory_mib for d in devices}
    pinned = {uuid: mib * part // share.of for uuid, mib in memory.items()}
    with contextlib.suppress(KeyError, ValueError):
        consumed = int(parse_quantity(share.consumed["memory"]) / MIB)
        pinned = {uuid: min(mib, consumed) for uuid, mib in memory.items()}
    limits = MpsLimits(
        active_thread_percentage=max(1, 100 * part // share.of), per_device_mib=pinned
    )
    return mps_client_env(limits, devices, "")


def configured(
    answer: ContainerAllocation,
    resource: str,
    devices: Sequence[Device],
    configs: Sequence[ClaimParameters],
    *,
    mps_resource: bool,
) -> ContainerAllocation:
    """``answer`` (the device-plugin contract for ``devices``) under the claim's sharing."""
    sharing: GpuSharing = last_sharing([(c.parameters, c.where) for c in configs])
    where = configs[-1].where if configs else ""
    if sharing.strategy == MPS:
        if not mps_resource:
            raise ClaimParametersError(
                where,
                "sharing.strategy",
                f"MPS needs GPUs shared by the node's MPS control daemon; {resource} is not "
                "MPS-shared (the config file's sharing.mps makes MPS replicas)",
            )
        extra = mps_client_env(sharing.mps, devices, where)
        return dataclasses.replace(answer, envs={**answer.envs, **extra})
    if mps_resource:
        raise ClaimParametersError(
            where,
            "sharing.strategy",
            f"TimeSlicing, but {resource} devices are MPS replicas (the config file's "
            "sharing.mps); ask for strategy MPS",
        )
    if sharing.interval != DEFAULT_INTERVAL:
        raise ClaimParametersError(
            where,
            "sharing.timeSlicingConfig.interval",
            f"{sharing.interval}: only {DEFAULT_INTERVAL} is served (this driver does not set "
            "the GPU's time slice)",
        )
    return answer
