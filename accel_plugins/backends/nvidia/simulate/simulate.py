"""A simulated NVML that answers from a :class:`NodeProfile` data table.

It implements the same :class:`~accel_plugins.backends.nvidia.nvml.Nvml`
Protocol as the pynvml adapter, so discovery, health and allocation run
unchanged on any machine (tests, ``demo``, ``--simulate``). Faults come from
the profile's scripted events (timed from the first event set) or from
:meth:`SimulatedNvml.inject_xid`, :meth:`lose_gpu` and :meth:`restore_gpu`.
Telemetry (utilisation, memory, temperature, power, ECC counts) answers from
per-GPU values that :meth:`SimulatedNvml.set_telemetry` changes, including
"not supported" (None) and a failing call (an NvmlError to raise).

Simplifications, on purpose: MIG GPU-instance IDs are the slot number + 1 and
compute-instance IDs 0; NVLink peers are direct links unless the profile sets
``nvswitch`` (then every link ends on an NVSwitch); a pair token without a
PCIe relation (a bare ``NV<n>``) answers the common ancestor ``NODE`` when
both GPUs are on one NUMA node and ``SYS`` otherwise; a GPU lost on the bus
first reports XID 79 and then makes every call on it (and the next event
wait) fail with ``GpuLostError``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from accel_plugins.backends.nvidia.allocation.pair_score import LEVEL_OF_PCIE, parse_link
from accel_plugins.backends.nvidia.errors import (
    GpuLostError,
    NvmlError,
    NvmlInitError,
    NvmlNotSupportedError,
)
from accel_plugins.backends.nvidia.nvml import (
    TOPOLOGY_NODE,
    TOPOLOGY_SYSTEM,
    EventSet,
    Handle,
    MigPlacement,
    Utilization,
    XidEvent,
)
from accel_plugins.backends.nvidia.nvml_protocol import BRAND_NVIDIA
from accel_plugins.backends.nvidia.simulate.simulated_profile import (
    NodeProfile,
    SimEvent,
    mig_uuid,
    nv_links,
)

_UNINITIALIZED = 1
_NOT_SUPPORTED = 3
_GPU_IS_LOST = 15
_XID_FALLEN_OFF_BUS = 79

TelemetryValue: TypeAlias = "float | NvmlError | None"
"""A number to report, None for "not supported", or an error to raise."""

# What an idle GPU reports until a test or demo says otherwise.
DEFAULT_TELEMETRY: dict[str, TelemetryValue] = {
    "utilization_gpu": 0,
    "utilization_memory": 0,
    "memory_used_bytes": 0,
    "temperature_celsius": 32,
    "power_watts": 61.5,
    "ecc_corrected": 0,
    "ecc_uncorrected": 0,
}


# The versions go-nvml's dgxa100 mock reports, so labels look like a real node's.
SIMULATED_DRIVER_VERSION = "550.54.15"
SIMULATED_CUDA_DRIVER_VERSION = 12040

# (compute capability, MIG-capable) by a word of the GPU's name, as NVIDIA publishes them.
_KNOWN_MODELS = (
    ("H200", (9, 0), True),
    ("H100", (9, 0), True),
    ("A100", (8, 0), True),
    ("A30", (8, 0), True),
    ("L40S", (8, 9), False),
    ("L4", (8, 9), False),
    ("A10", (8, 6), False),
    ("T4", (7, 5), False),
    ("V100", (7, 0), False),
)


def _known(name: str) -> tuple[tuple[int, int], bool]:
    """The compute capability and MIG support of a simulated GPU, from its name."""
    words = name.replace("-", " ").split()
    for model, capability, mig in _KNOWN_MODELS:
        if model in words:
            return capability, mig
    return (0, 0), False


@dataclass(frozen=True, slots=True)
class SimHandle:
    gpu: int
    mig: int | None = None


class SimulatedNvml:
    """:class:`Nvml` over a profile; thread-safe like the real library."""

    def __init__(
        self,
        profile: NodeProfile,
        *,
        init_error: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profile = profile
        self.init_error = init_error
        self._clock = clock
        self._cond = threading.Condition()
        self._refcount = 0
        self.init_calls = 0
        self.shutdown_calls = 0
        self._lost: set[int] = set()
        self._sets: list[_SimEventSet] = []
        self._script: deque[SimEvent] = deque(profile.events)
        self._started: float | None = None
        self._telemetry = [dict(DEFAULT_TELEMETRY) for _ in profile.gpus]

    # -- lifecycle ---------------------------------------------------------

    def init(self) -> None:
        if self.init_error is not None:
            raise NvmlInitError(self.init_error)
        with self._cond:
            self._refcount += 1
            self.init_calls += 1

    def shutdown(self) -> None:
        with self._cond:
            self._check_init("nvmlShutdown")
            self._refcount -= 1
            self.shutdown_calls += 1

    @property
    def event_sets(self) -> int:
        """How many event sets are open (a health thread holds one)."""
        with self._cond:
            return len(self._sets)

    @property
    def initialized(self) -> bool:
        return self._refcount > 0

    def _check_init(self, call: str) -> None:
        if self._refcount <= 0:
            raise NvmlError(call, _UNINITIALIZED, "Uninitialized")

    def _gpu(self, call: str, handle: Handle) -> SimHandle:
        if not isinstance(handle, SimHandle):
            raise TypeError(f"{call}: not a simulated handle: {handle!r}")
        with self._cond:
            self._check_init(call)
            if handle.gpu in self._lost:
                raise GpuLostError(call, _GPU_IS_LOST, "GPU is lost")
        return handle

    # -- queries -----------------------------------------------------------

    def device_count(self) -> int:
        with self._cond:
            self._check_init("nvmlDeviceGetCount")
        return len(self.profile.gpus)

    def device_handle(self, index: int) -> Handle:
        if not 0 <= index < len(self.profile.gpus):
            raise NvmlError("nvmlDeviceGetHandleByIndex", 2, "Invalid Argument")
        return self._gpu("nvmlDeviceGetHandleByIndex", SimHandle(index))

    def name(self, handle: Handle) -> str:
        h = self._gpu("nvmlDeviceGetName", handle)
        gpu = self.profile.gpus[h.gpu]
        if h.mig is None:
            return gpu.name
        return f"{gpu.name} MIG {gpu.mig[h.mig].profile}"

    def uuid(self, handle: Handle) -> str:
        h = self._gpu("nvmlDeviceGetUUID", handle)
        gpu = self.profile.gpus[h.gpu]
        return gpu.uuid if h.mig is None else mig_uuid(gpu.uuid, h.mig)

    def minor(self, handle: Handle) -> int:
        h = self._gpu("nvmlDeviceGetMinorNumber", handle)
        if h.mig is not None:
            raise NvmlNotSupportedError("nvmlDeviceGetMinorNumber", 3, "Not Supported")
        return h.gpu

    def memory_total(self, handle: Handle) -> int:
        h = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        gpu = self.profile.gpus[h.gpu]
        mib = gpu.memory_mib if h.mig is None else gpu.mig[h.mig].memory_mib
        return mib * 1024 * 1024

    def pci_bus_id(self, handle: Handle) -> str:
        h = self._gpu("nvmlDeviceGetPciInfo", handle)
        return self.profile.gpus[h.gpu].pci_bus_id

    def brand(self, handle: Handle) -> int:
        self._gpu("nvmlDeviceGetBrand", handle)
        return BRAND_NVIDIA  # what NVIDIA's data-centre GPUs report (its mock NVML's too)

    # -- telemetry -----------------------------------------------------------

    def set_telemetry(self, gpu: int, **values: TelemetryValue) -> None:
        """Set what GPU ``gpu`` reports, by :data:`DEFAULT_TELEMETRY` key."""
        unknown = set(values) - set(DEFAULT_TELEMETRY)
        if unknown:
            raise TypeError(
                f"unknown telemetry {sorted(unknown)}; known: {sorted(DEFAULT_TELEMETRY)}"
            )
        with self._cond:
            self._telemetry[gpu].update(values)

    def _reading(self, call: str, handle: Handle, key: str) -> float:
        h = self._gpu(call, handle)
        value = self._telemetry[h.gpu][key] if h.mig is None else None
        if isinstance(value, NvmlError):
            raise value
        if value is None:
            raise NvmlNotSupportedError(call, _NOT_SUPPORTED, "Not Supported")
        return value

    def utilization(self, handle: Handle) -> Utilization:
        call = "nvmlDeviceGetUtilizationRates"
        return Utilization(
            gpu=int(self._reading(call, handle, "utilization_gpu")),
            memory=int(self._reading(call, handle, "utilization_memory")),
        )

    def memory_used(self, handle: Handle) -> int:
        return int(self._reading("nvmlDeviceGetMemoryInfo", handle, "memory_used_bytes"))

    def temperature(self, handle: Handle) -> int:
        return int(self._reading("nvmlDeviceGetTemperature", handle, "temperature_celsius"))

    def power_usage(self, handle: Handle) -> float:
        return float(self._reading("nvmlDeviceGetPowerUsage", handle, "power_watts"))

    def ecc_errors(self, handle: Handle, *, corrected: bool) -> int:
        key = "ecc_corrected" if corrected else "ecc_uncorrected"
        return int(self._reading("nvmlDeviceGetTotalEccErrors", handle, key))

    def numa_node(self, handle: Handle) -> int | None:
        h = self._gpu("nvmlDeviceGetNumaNodeId", handle)
        return self.profile.gpus[h.gpu].numa_node

    def mig_enabled(self, handle: Handle) -> bool:
        h = self._gpu("nvmlDeviceGetMigMode", handle)
        return self.profile.gpus[h.gpu].mig_enabled and h.mig is None

    def mig_capable(self, handle: Handle) -> bool:
        h = self._gpu("nvmlDeviceGetMigMode", handle)
        gpu = self.profile.gpus[h.gpu]
        return gpu.mig_enabled or _known(gpu.name)[1]

    def driver_version(self) -> str:
        with self._cond:
            self._check_init("nvmlSystemGetDriverVersion")
        return SIMULATED_DRIVER_VERSION

    def cuda_driver_version(self) -> int:
        with self._cond:
            self._check_init("nvmlSystemGetCudaDriverVersion")
        return SIMULATED_CUDA_DRIVER_VERSION

    def compute_capability(self, handle: Handle) -> tuple[int, int]:
        h = self._gpu("nvmlDeviceGetCudaComputeCapability", handle)
        return _known(self.profile.gpus[h.gpu].name)[0]

    def mig_handles(self, handle: Handle) -> list[Handle]:
        h = self._gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        return [SimHandle(h.gpu, slot) for slot in range(len(self.profile.gpus[h.gpu].mig))]

    def mig_placement(self, mig: Handle) -> MigPlacement:
        h = self._gpu("nvmlDeviceGetGpuInstanceId", mig)
        if h.mig is None:
            raise NvmlNotSupportedError("nvmlDeviceGetGpuInstanceId", 3, "Not Supported")
        spec = self.profile.gpus[h.gpu].mig[h.mig]
        return MigPlacement(
            gpu_instance=h.mig + 1,
            compute_instance=0,
            gpu_slices=spec.gpu_slices,
            compute_slices=spec.compute_slices,
            memory_mib=spec.memory_mib,
        )

    def topology_level(self, first: Handle, second: Handle) -> int:
        a = self._gpu("nvmlDeviceGetTopologyCommonAncestor", first)
        b = self._gpu("nvmlDeviceGetTopologyCommonAncestor", second)
        link = parse_link(self.profile.topology[a.gpu][b.gpu])
        if link is not None and link.pcie is not None:
            return LEVEL_OF_PCIE[link.pcie]
        # NVLinked pairs still share some PCIe ancestor; NUMA decides which.
        ga, gb = self.profile.gpus[a.gpu], self.profile.gpus[b.gpu]
        same = ga.numa_node is not None and ga.numa_node == gb.numa_node
        return TOPOLOGY_NODE if same else TOPOLOGY_SYSTEM

    def nvlink_remotes(self, handle: Handle) -> list[str]:
        h = self._gpu("nvmlDeviceGetNvLinkState", handle)
        row = self.profile.topology[h.gpu]
        if self.profile.nvswitch:
            links = max(nv_links(t) for t in row)
            return [f"0000:{0xF0 + link % 8:02x}:00.0" for link in range(links)]
        remotes: list[str] = []
        for peer, token in enumerate(row):
            remotes.extend([self.profile.gpus[peer].pci_bus_id] * nv_links(token))
        return remotes

    # -- events ------------------------------------------------------------

    def create_event_set(self) -> EventSet:
        with self._cond:
            self._check_init("nvmlEventSetCreate")
            if self._started is None:
                self._started = self._clock()
            events = _SimEventSet(self)
            self._sets.append(events)
            return events

    def inject_xid(self, gpu: int, xid: int, mig: int | None = None) -> None:
        """Report ``xid`` on GPU ``gpu`` (or on its MIG device in slot ``mig``)."""
        with self._cond:
            self._deliver(gpu, xid, mig)

    def lose_gpu(self, gpu: int) -> None:
        """The GPU falls off the bus: XID 79, then every call on it fails."""
        with self._cond:
            self._deliver(gpu, _XID_FALLEN_OFF_BUS, None)
            self._lost.add(gpu)
            for events in self._sets:
                events.lost_pending = True
            self._cond.notify_all()

    def restore_gpu(self, gpu: int) -> None:
        with self._cond:
            self._lost.discard(gpu)

    def _deliver(self, gpu: int, xid: int, mig: int | None) -> None:
        spec = self.profile.gpus[gpu]
        gi = None if mig is None else mig + 1
        event = XidEvent(
            uuid=spec.uuid, xid=xid, gpu_instance=gi, compute_instance=None if mig is None else 0
        )
        for events in self._sets:
            if gpu in events.registered:
                events.queue.append(event)
        self._cond.notify_all()

    def _run_script(self) -> float | None:
        """Apply scripted events that are due; return seconds until the next one."""
        if self._started is None:
            return None
        now = self._clock() - self._started
        while self._script and self._script[0].at <= now:
            step = self._script.popleft()
            if step.lost:
                self._deliver(step.gpu, _XID_FALLEN_OFF_BUS, None)
                self._lost.add(step.gpu)
                for events in self._sets:
                    events.lost_pending = True
            elif step.restore:
                self._lost.discard(step.gpu)
            elif step.xid is not None:
                self._deliver(step.gpu, step.xid, step.mig)
        return self._script[0].at - now if self._script else None


class _SimEventSet:
    def __init__(self, owner: SimulatedNvml) -> None:
        self._owner = owner
        self.registered: set[int] = set()
        self.queue: deque[XidEvent] = deque()
        self.lost_pending = False
        self.freed = False
        self.interrupted = False

    def register(self, handle: Handle) -> None:
        h = self._owner._gpu("nvmlDeviceRegisterEvents", handle)
        with self._owner._cond:
            self.registered.add(h.gpu)

    def wait(self, timeout_ms: int) -> XidEvent | None:
        owner = self._owner
        deadline = owner._clock() + timeout_ms / 1000
        with owner._cond:
            while True:
                owner._check_init("nvmlEventSetWait")
                next_due = owner._run_script()
                if self.queue:
                    return self.queue.popleft()
                if self.lost_pending:
                    self.lost_pending = False
                    raise GpuLostError("nvmlEventSetWait", _GPU_IS_LOST, "GPU is lost")
                remaining = deadline - owner._clock()
                if remaining <= 0 or self.interrupted:
                    self.interrupted = False
                    return None
                owner._cond.wait(remaining if next_due is None else min(remaining, next_due))

    def interrupt(self) -> bool:
        with self._owner._cond:
            self.interrupted = True
            self._owner._cond.notify_all()
        return True

    def free(self) -> None:
        with self._owner._cond:
            self.freed = True
            if self in self._owner._sets:
                self._owner._sets.remove(self)
