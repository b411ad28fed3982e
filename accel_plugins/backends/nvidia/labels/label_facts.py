"""Read what the node labels need from NVML, beyond what discovery reads.

A narrow Protocol of its own, so only the NVML implementations that label a
node (the pynvml adapter and the simulated NVML) need these calls.
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

from accel_plugins.backends.nvidia.discovery import Node
from accel_plugins.backends.nvidia.errors import NvmlError
from accel_plugins.backends.nvidia.labels.node_labels import LabelFacts
from accel_plugins.backends.nvidia.nvml import Handle

log = logging.getLogger(__name__)


@runtime_checkable
class LabelNvml(Protocol):
    """NVML's system versions and per-GPU capabilities (NVML must be initialised)."""

    def device_handle(self, index: int) -> Handle: ...

    def driver_version(self) -> str:
        """``nvmlSystemGetDriverVersion``, e.g. ``550.54.15``."""
        ...

    def cuda_driver_version(self) -> int:
        """``nvmlSystemGetCudaDriverVersion``: 1000 * major + 10 * minor (12040)."""
        ...

    def compute_capability(self, handle: Handle) -> tuple[int, int]:
        """``nvmlDeviceGetCudaComputeCapability``: (major, minor)."""
        ...

    def mig_capable(self, handle: Handle) -> bool:
        """True when the GPU supports MIG at all (enabled or not)."""
        ...


def read_label_facts(nvml: LabelNvml, node: Node) -> LabelFacts:
    """Versions and capabilities of ``node``'s GPUs; a GPU that cannot say is left out."""
    capability: dict[str, tuple[int, int]] = {}
    capable: set[str] = set()
    for gpu in node.gpus:
        try:
            handle = nvml.device_handle(gpu.index)
            capability[gpu.uuid] = nvml.compute_capability(handle)
            if nvml.mig_capable(handle):
                capable.add(gpu.uuid)
        except NvmlError as exc:
            log.info("GPU %d: no compute capability or MIG support to label: %s", gpu.index, exc)
    return LabelFacts(
        driver_version=nvml.driver_version(),
        cuda_driver_version=nvml.cuda_driver_version(),
        compute_capability=capability,
        mig_capable=frozenset(capable),
    )
