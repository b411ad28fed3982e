"""What the NVIDIA backend asks of NVML: the :class:`Nvml` Protocol and the values it answers.

The pynvml implementation (:mod:`.nvml`) and the simulated NVML
(:mod:`.simulate.simulate`) both stand behind it; nothing here imports
``pynvml``. :mod:`.nvml` re-exports every name, so callers import from there.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from accel_plugins.backends.nvidia.errors import NvmlError

# session() logs under the adapter's name, as it did before it moved here.
log = logging.getLogger("accel_plugins.backends.nvidia.nvml")

Handle: TypeAlias = object
"""An opaque device handle; only the adapter that made it can read it."""

# NVML's topology levels (nvmlGpuTopologyLevel_t): the common ancestor of two GPUs.
TOPOLOGY_INTERNAL = 0
TOPOLOGY_SINGLE = 10  # one PCIe switch: nvidia-smi's PIX
TOPOLOGY_MULTIPLE = 20  # several PCIe switches, no host bridge: PXB
TOPOLOGY_HOSTBRIDGE = 30  # through one host bridge: PHB
TOPOLOGY_NODE = 40  # host bridges within one NUMA node: NODE
TOPOLOGY_SYSTEM = 50  # across NUMA nodes (SMP interconnect): SYS
BRAND_NVIDIA = 14  # NVML_BRAND_NVIDIA


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """Where a MIG device sits inside its GPU and how big it is."""

    gpu_instance: int
    compute_instance: int
    gpu_slices: int
    compute_slices: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One critical XID reported by a GPU.

    ``uuid`` is the reporting GPU's UUID (None when NVML could not say which);
    the instance IDs are None when the event concerns the whole GPU.
    """

    uuid: str | None
    xid: int
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class Utilization:
    """Percent of the last sample period (1/6 s to 1 s, by product) the GPU was busy.

    ``gpu``: one or more kernels ran; ``memory``: device memory was read or written.
    """

    gpu: int
    memory: int


class EventSet(Protocol):
    """An NVML event set watching XID critical errors."""

    def register(self, handle: Handle) -> None:
        """Watch ``handle``; NvmlNotSupportedError when the GPU cannot report XIDs."""
        ...

    def wait(self, timeout_ms: int) -> XidEvent | None:
        """Block up to ``timeout_ms``; None on timeout. GpuLostError when a GPU vanished."""
        ...

    def interrupt(self) -> bool:
        """End a blocked ``wait`` now (returning None) where the library can; True if so.

        NVML cannot: its wait ends at the timeout. Callable from any thread.
        """
        ...

    def free(self) -> None: ...


class Nvml(Protocol):
    """The NVML calls the backend needs, and nothing more.

    ``init`` and ``shutdown`` are paired (see :func:`session`); every other
    call is valid only between them. Errors are :class:`NvmlError`
    subclasses, never pynvml's.
    """

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def device_count(self) -> int: ...

    def device_handle(self, index: int) -> Handle: ...

    def name(self, handle: Handle) -> str: ...

    def uuid(self, handle: Handle) -> str: ...

    def minor(self, handle: Handle) -> int: ...

    def memory_total(self, handle: Handle) -> int:
        """Total framebuffer memory in bytes."""
        ...

    def pci_bus_id(self, handle: Handle) -> str:
        """Bus ID in sysfs form, e.g. ``0000:07:00.0``."""
        ...

    def brand(self, handle: Handle) -> int:
        """The product brand, NVML's ``nvmlBrandType_t`` (``NVML_BRAND_*``: 14 is NVIDIA)."""
        ...

    # Telemetry, read at scrape time: NvmlNotSupportedError where the GPU has no such sensor.

    def utilization(self, handle: Handle) -> Utilization: ...

    def memory_used(self, handle: Handle) -> int:
        """Framebuffer memory in use, in bytes."""
        ...

    def temperature(self, handle: Handle) -> int:
        """GPU die temperature in degrees Celsius."""
        ...

    def power_usage(self, handle: Handle) -> float:
        """Power draw of the board in watts."""
        ...

    def ecc_errors(self, handle: Handle, *, corrected: bool) -> int:
        """Corrected (single-bit) or uncorrected ECC errors since the driver loaded."""
        ...

    def numa_node(self, handle: Handle) -> int | None: ...

    def mig_enabled(self, handle: Handle) -> bool:
        """Current (not pending) MIG mode; False for GPUs without MIG."""
        ...

    def mig_handles(self, handle: Handle) -> list[Handle]:
        """Handles of the MIG devices that exist on a MIG-enabled GPU, in slot order."""
        ...

    def mig_placement(self, mig: Handle) -> MigPlacement: ...

    def topology_level(self, first: Handle, second: Handle) -> int:
        """NVML's common-ancestor level of two GPUs (a ``TOPOLOGY_*`` constant)."""
        ...

    def nvlink_remotes(self, handle: Handle) -> list[str]:
        """Remote PCI bus ID of each active NVLink, one entry per link (GPUs and NVSwitches)."""
        ...

    def create_event_set(self) -> EventSet: ...


@contextlib.contextmanager
def session(nvml: Nvml) -> Iterator[Nvml]:
    """Init NVML for the duration of a block and always shut it down after."""
    nvml.init()
    try:
        yield nvml
    finally:
        try:
            nvml.shutdown()
        except NvmlError as exc:
            log.warning("NVML shutdown failed: %s", exc)


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:07:00.0`` (NVML) -> ``0000:07:00.0`` (sysfs), lower case."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not rest:
        return text
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text
