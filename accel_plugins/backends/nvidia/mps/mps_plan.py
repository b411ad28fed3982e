"""What each MPS control daemon is told: the per-client limits of its resource.

NVIDIA's ``cmd/mps-control-daemon/mps/daemon.go`` (``Start``): first, for each
GPU the resource shares, ``set_default_device_pinned_mem_limit <index> <M>M``
with ``<M>`` = the GPU's total memory / its replicas, in whole MiB (GPUs that
report no memory are skipped); then ``set_default_active_thread_percentage
<P>`` with ``<P>`` = 100 / replicas per GPU, both integer divisions. NVIDIA
divides by the average replica count (it shares every GPU alike); here GPUs of
one resource may have different counts, and the percentage, one value for the
whole daemon, uses the largest count so that no client gets more than its share.
GPUs are listed by index (NVIDIA walks a Go map, in no order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.plugin.device import Device


@dataclass(frozen=True, slots=True)
class SharedGpu:
    index: str
    uuid: str
    memory_mib: int
    replicas: int


@dataclass(frozen=True, slots=True)
class DaemonPlan:
    """One control daemon: its resource and the GPUs it shares."""

    resource: str
    gpus: tuple[SharedGpu, ...]

    def commands(self) -> list[str]:
        out = [
            f"set_default_device_pinned_mem_limit {gpu.index} {gpu.memory_mib // gpu.replicas}M"
            for gpu in self.gpus
            if gpu.memory_mib > 0
        ]
        if self.gpus:
            most = max(gpu.replicas for gpu in self.gpus)
            out.append(f"set_default_active_thread_percentage {100 // most}")
        return out


def _index_key(index: str) -> tuple[int, ...]:
    return tuple(int(part) for part in index.split(":"))


def daemon_plans(
    resources: Mapping[str, Sequence[Device]], mps_resources: frozenset[str]
) -> list[DaemonPlan]:
    """A plan per MPS resource with devices, from the tree the plugin would publish."""
    plans = []
    for name in sorted(mps_resources):
        counts: dict[str, int] = {}
        gpus: dict[str, SharedGpu] = {}
        for device in resources.get(name, ()):
            facts = gpu_facts(device)
            counts[facts.index] = counts.get(facts.index, 0) + 1
            gpus[facts.index] = SharedGpu(facts.index, facts.uuid, facts.memory_mib, 0)
        shared = tuple(
            SharedGpu(g.index, g.uuid, g.memory_mib, counts[i])
            for i, g in sorted(gpus.items(), key=lambda item: _index_key(item[0]))
        )
        if shared:
            plans.append(DaemonPlan(name, shared))
    return plans
