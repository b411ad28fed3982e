"""What the NVIDIA backend knows about each device it publishes.

Carried in ``Device.facts`` and read back only by this backend's own hooks
(allocation, preferred allocation, health, telemetry): the framework never
looks inside.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from accel_plugins.plugin.device import Device


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """A whole GPU, one of its MIG devices, or a time-sliced replica of either.

    ``index`` is NVIDIA's index string (``3`` for a GPU, ``3:1`` for a MIG
    device); ``links`` is the parent GPU's row of pair tokens (``NV2+SYS``:
    direct NVLinks and PCIe relation, see ``pair_score.py``) and
    ``link_peers`` the GPU index of each entry (equal to the position unless a
    GPU was lost). MIG devices add ``parent_uuid``, ``mig_profile`` and their
    instance IDs; replicas add ``replica`` (n) and ``replica_of`` (the shared
    device's ID).
    """

    kind: str  # "gpu" or "mig"
    index: str
    gpu_index: int
    uuid: str
    minor: int
    name: str
    memory_mib: int
    pci_bus_id: str
    numa_node: int | None
    links: tuple[str, ...] = ()
    link_peers: tuple[int, ...] = ()
    parent_uuid: str | None = None
    mig_profile: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    replica: int | None = None
    replica_of: str | None = None
    brand: int = 0  # the (parent) GPU's NVML_BRAND_* value

    @property
    def is_replica(self) -> bool:
        return self.replica_of is not None

    @property
    def is_whole_gpu(self) -> bool:
        return self.kind == "gpu" and self.replica_of is None

    @property
    def gpu_uuid(self) -> str:
        """The physical GPU's UUID (the parent of a MIG device)."""
        return self.parent_uuid or self.uuid

    def as_replica(self, n: int, of: str) -> GpuFacts:
        return dataclasses.replace(self, replica=n, replica_of=of)


def gpu_facts(device: Device) -> GpuFacts:
    """The facts of a device this backend published (TypeError for any other)."""
    return device.facts_as(GpuFacts)


def known_gpu(device: Device) -> GpuFacts | None:
    """The device's GPU facts, or None for a device that carries none."""
    return device.facts if isinstance(device.facts, GpuFacts) else None
