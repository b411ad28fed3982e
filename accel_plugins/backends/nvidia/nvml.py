"""The one door to NVML: a narrow Protocol (:mod:`.nvml_protocol`) and its pynvml implementation.

Everything else in the NVIDIA backend talks to :class:`Nvml`, never to
``pynvml``, so the simulated NVML (``simulate.py``) and the real library are
interchangeable and NVML's error codes become this project's exceptions in
one place. This is the only module that imports ``pynvml``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from accel_plugins.backends.nvidia.errors import (
    GpuLostError,
    NvmlError,
    NvmlFunctionMissingError,
    NvmlInitError,
    NvmlInvalidArgumentError,
    NvmlNotFoundError,
    NvmlNotSupportedError,
    NvmlTimeoutError,
)
from accel_plugins.backends.nvidia.nvml_library import library_candidates
from accel_plugins.backends.nvidia.nvml_protocol import (
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    EventSet,
    Handle,
    MigPlacement,
    Nvml,
    Utilization,
    XidEvent,
    normalize_bus_id,
    session,
)

# The Protocol and its values are importable from here, as before they had a module.
__all__ = [
    "TOPOLOGY_HOSTBRIDGE",
    "TOPOLOGY_INTERNAL",
    "TOPOLOGY_MULTIPLE",
    "TOPOLOGY_NODE",
    "TOPOLOGY_SINGLE",
    "TOPOLOGY_SYSTEM",
    "EventSet",
    "Handle",
    "MigPlacement",
    "Nvml",
    "NvmlFunctionMissingError",
    "NvmlInvalidArgumentError",
    "NvmlTimeoutError",
    "Pynvml",
    "Utilization",
    "XidEvent",
    "library_candidates",
    "normalize_bus_id",
    "session",
]

log = logging.getLogger(__name__)

# 0xFFFFFFFF in an event's instance fields means "the whole GPU".
_ANY_INSTANCE = 0xFFFFFFFF
_XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError


T = TypeVar("T")


class Pynvml:
    """:class:`Nvml` backed by the ``pynvml`` bindings (package nvidia-ml-py).

    pynvml loads ``libnvidia-ml.so.1`` from the system search path. A driver
    installed under another root (the GPU operator's ``/run/nvidia/driver``)
    is not on that path, so we load the library ourselves from the
    candidates of :func:`library_candidates` and hand it to pynvml. ``sys_root``
    is where ``bus/pci/devices`` lives, for the NUMA node on older drivers.
    """

    def __init__(
        self,
        driver_root: Path = Path("/"),
        *,
        library: str | None = None,
        sys_root: Path = Path("/sys"),
    ) -> None:
        self.driver_root = driver_root
        self.library = library
        self.sys_root = sys_root
        self.loaded_from: str | None = None

    # -- lifecycle ---------------------------------------------------------

    def init(self) -> None:
        import pynvml

        tried = self._load_library()
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlInitError(
                "\n".join(
                    [
                        f"NVML failed to initialise: {_error_text(exc)}",
                        f"  library: {self.loaded_from}",
                        f"  driver root: {self.driver_root}",
                        *tried,
                        "  Is the NVIDIA kernel driver loaded, and does the library match it?",
                        "  Set --fail-on-init-error=false to keep running with no devices.",
                    ]
                )
            ) from exc

    def shutdown(self) -> None:
        import pynvml

        self._call("nvmlShutdown", pynvml.nvmlShutdown)

    def _load_library(self) -> list[str]:
        import pynvml

        candidates = library_candidates(self.driver_root, self.library)
        notes: list[str] = []
        with pynvml.libLoadLock:
            current = getattr(pynvml, "nvmlLib", None)
            if current is not None and self.library is None:
                self.loaded_from = self.loaded_from or "(already loaded by this process)"
                return notes
            if current is not None and self.loaded_from == self.library:
                return notes
            errors: list[str] = []
            for candidate in candidates:
                if candidate.startswith("/") and not os.path.exists(candidate):
                    errors.append(f"    {candidate}: not found")
                    continue
                try:
                    lib = ctypes.CDLL(candidate)
                except OSError as exc:
                    errors.append(f"    {candidate}: {exc}")
                    continue
                # pynvml caches function pointers per library; a new library
                # needs an empty cache (private, but stable across versions).
                pynvml.nvmlLib = lib
                pynvml._nvmlGetFunctionPointer_cache.clear()
                self.loaded_from = candidate
                return ["  tried before it:", *errors] if errors else notes
        raise NvmlInitError(
            "\n".join(
                [
                    "NVML (libnvidia-ml.so.1) could not be loaded, so no NVIDIA GPU can be listed.",
                    f"  driver root: {self.driver_root}",
                    "  tried:",
                    *errors,
                    "  Is the NVIDIA driver installed? In a container, is the driver mounted and",
                    "  --nvidia-driver-root (NVIDIA_DRIVER_ROOT) pointing at it?",
                    "  Set --fail-on-init-error=false to keep running with no devices.",
                ]
            )
        )

    # -- queries -----------------------------------------------------------

    def _call(self, name: str, fn: Callable[..., T], *args: object) -> T:
        import pynvml

        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise _map_error(name, exc) from exc

    def device_count(self) -> int:
        import pynvml

        return int(self._call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))

    def device_handle(self, index: int) -> Handle:
        import pynvml

        return self._call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)

    def name(self, handle: Handle) -> str:
        import pynvml

        return _text(self._call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))

    def uuid(self, handle: Handle) -> str:
        import pynvml

        return _text(self._call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))

    def minor(self, handle: Handle) -> int:
        import pynvml

        return int(self._call("nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber, handle))

    def memory_total(self, handle: Handle) -> int:
        import pynvml

        info = self._call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
        return int(info.total)

    def pci_bus_id(self, handle: Handle) -> str:
        import pynvml

        info = self._call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo_v3, handle)
        return normalize_bus_id(_text(info.busId))

    def utilization(self, handle: Handle) -> Utilization:
        import pynvml

        rates = self._call(
            "nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, handle
        )
        return Utilization(gpu=int(rates.gpu), memory=int(rates.memory))

    def memory_used(self, handle: Handle) -> int:
        import pynvml

        info = self._call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)
        return int(info.used)

    def temperature(self, handle: Handle) -> int:
        import pynvml

        return int(
            self._call(
                "nvmlDeviceGetTemperature",
                pynvml.nvmlDeviceGetTemperature,
                handle,
                pynvml.NVML_TEMPERATURE_GPU,
            )
        )

    def power_usage(self, handle: Handle) -> float:
        import pynvml

        milliwatts = self._call("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, handle)
        return int(milliwatts) / 1000

    def ecc_errors(self, handle: Handle, *, corrected: bool) -> int:
        import pynvml

        kind = (
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            if corrected
            else pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        )
        return int(
            self._call(
                "nvmlDeviceGetTotalEccErrors",
                pynvml.nvmlDeviceGetTotalEccErrors,
                handle,
                kind,
                pynvml.NVML_VOLATILE_ECC,
            )
        )

    def brand(self, handle: Handle) -> int:
        import pynvml

        return int(self._call("nvmlDeviceGetBrand", pynvml.nvmlDeviceGetBrand, handle))

    def numa_node(self, handle: Handle) -> int | None:
        import pynvml

        try:
            node = int(
                self._call("nvmlDeviceGetNumaNodeId", pynvml.nvmlDeviceGetNumaNodeId, handle)
            )
            return node if node >= 0 else None
        except (NvmlNotSupportedError, NvmlFunctionMissingError):
            pass
        # Older drivers lack the call; the kernel knows the PCI device's node.
        path = self.sys_root / "bus/pci/devices" / self.pci_bus_id(handle) / "numa_node"
        try:
            node = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        return node if node >= 0 else None

    def mig_enabled(self, handle: Handle) -> bool:
        import pynvml

        try:
            current, _pending = self._call(
                "nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle
            )
        except (NvmlNotSupportedError, NvmlFunctionMissingError):
            return False
        return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)

    def mig_capable(self, handle: Handle) -> bool:
        import pynvml

        try:
            self._call("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
        except (NvmlNotSupportedError, NvmlFunctionMissingError):
            return False
        return True

    def driver_version(self) -> str:
        import pynvml

        return _text(self._call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))

    def cuda_driver_version(self) -> int:
        import pynvml

        return int(
            self._call("nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion)
        )

    def compute_capability(self, handle: Handle) -> tuple[int, int]:
        import pynvml

        major, minor = self._call(
            "nvmlDeviceGetCudaComputeCapability", pynvml.nvmlDeviceGetCudaComputeCapability, handle
        )
        return int(major), int(minor)

    def mig_handles(self, handle: Handle) -> list[Handle]:
        import pynvml

        count = int(
            self._call(
                "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle
            )
        )
        handles: list[Handle] = []
        for slot in range(count):
            try:
                handles.append(
                    self._call(
                        "nvmlDeviceGetMigDeviceHandleByIndex",
                        pynvml.nvmlDeviceGetMigDeviceHandleByIndex,
                        handle,
                        slot,
                    )
                )
            except NvmlNotFoundError:
                continue  # an empty slot: MIG devices need not be contiguous
        return handles

    def mig_placement(self, mig: Handle) -> MigPlacement:
        import pynvml

        gi = self._call("nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig)
        ci = self._call(
            "nvmlDeviceGetComputeInstanceId", pynvml.nvmlDeviceGetComputeInstanceId, mig
        )
        attrs = self._call("nvmlDeviceGetAttributes", pynvml.nvmlDeviceGetAttributes_v2, mig)
        return MigPlacement(
            gpu_instance=int(gi),
            compute_instance=int(ci),
            gpu_slices=int(attrs.gpuInstanceSliceCount),
            compute_slices=int(attrs.computeInstanceSliceCount),
            memory_mib=int(attrs.memorySizeMB),
        )

    def topology_level(self, first: Handle, second: Handle) -> int:
        import pynvml

        return int(
            self._call(
                "nvmlDeviceGetTopologyCommonAncestor",
                pynvml.nvmlDeviceGetTopologyCommonAncestor,
                first,
                second,
            )
        )

    def nvlink_remotes(self, handle: Handle) -> list[str]:
        import pynvml

        # As NVIDIA's allocator reads them: every link up to the maximum, skipping one
        # that is not supported, out of range or inactive (links need not be contiguous).
        skip = (NvmlNotSupportedError, NvmlInvalidArgumentError)
        remotes: list[str] = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                active = self._call(
                    "nvmlDeviceGetNvLinkState", pynvml.nvmlDeviceGetNvLinkState, handle, link
                )
                if not active:
                    continue
                info = self._call(
                    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                    pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
                    handle,
                    link,
                )
            except NvmlFunctionMissingError:
                break  # a driver without NVLink calls at all
            except skip:
                continue
            remotes.append(normalize_bus_id(_text(info.busId)))
        return remotes

    def create_event_set(self) -> EventSet:
        import pynvml

        return _PynvmlEventSet(self, self._call("nvmlEventSetCreate", pynvml.nvmlEventSetCreate))


class _PynvmlEventSet:
    def __init__(self, owner: Pynvml, handle: object) -> None:
        self._owner = owner
        self._handle = handle
        self._lock = threading.Lock()

    def register(self, handle: Handle) -> None:
        import pynvml

        self._owner._call(
            "nvmlDeviceRegisterEvents",
            pynvml.nvmlDeviceRegisterEvents,
            handle,
            pynvml.nvmlEventTypeXidCriticalError,
            self._handle,
        )

    def wait(self, timeout_ms: int) -> XidEvent | None:
        import pynvml

        try:
            data = self._owner._call(
                "nvmlEventSetWait", pynvml.nvmlEventSetWait_v2, self._handle, timeout_ms
            )
        except NvmlTimeoutError:
            return None
        if int(data.eventType) != _XID_CRITICAL_ERROR:
            return None
        try:
            uuid: str | None = self._owner.uuid(data.device)
        except NvmlError:
            uuid = None
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        whole = gi == _ANY_INSTANCE or ci == _ANY_INSTANCE
        return XidEvent(
            uuid=uuid,
            xid=int(data.eventData),
            gpu_instance=None if whole else gi,
            compute_instance=None if whole else ci,
        )

    def interrupt(self) -> bool:
        return False  # nvmlEventSetWait has no cancel; the waiter sees its stop flag at the timeout

    def free(self) -> None:
        import pynvml

        with self._lock:
            if self._handle is not None:
                handle, self._handle = self._handle, None
                self._owner._call("nvmlEventSetFree", pynvml.nvmlEventSetFree, handle)


def _map_error(call: str, exc: Exception) -> NvmlError:
    import pynvml

    code = int(getattr(exc, "value", pynvml.NVML_ERROR_UNKNOWN))
    text = _error_text(exc)
    kinds: dict[int, type[NvmlError]] = {
        pynvml.NVML_ERROR_NOT_SUPPORTED: NvmlNotSupportedError,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: NvmlFunctionMissingError,
        pynvml.NVML_ERROR_NOT_FOUND: NvmlNotFoundError,
        pynvml.NVML_ERROR_GPU_IS_LOST: GpuLostError,
        pynvml.NVML_ERROR_INVALID_ARGUMENT: NvmlInvalidArgumentError,
        pynvml.NVML_ERROR_TIMEOUT: NvmlTimeoutError,
    }
    return kinds.get(code, NvmlError)(call, code, text)


def _error_text(exc: Exception) -> str:
    # str(NVMLError) asks the library for the text; fall back to pynvml's table.
    try:
        return str(exc)
    except Exception:  # the library may be half-loaded; never mask the original error
        import pynvml

        code = getattr(exc, "value", None)
        return str(pynvml.NVMLError._errcode_to_string.get(code, f"NVML error {code}"))


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
