"""Per-GPU series for /metrics, read from NVML when Prometheus scrapes.

- Gauges (utilisation, memory, temperature, power, health) carry the GPU's
  ``uuid``, ``index`` and ``model`` and the ``namespace``/``pod``/``container``
  holding it: one series per holder (a time-sliced GPU can have several),
  one with empty pod labels when nobody holds it. A holder of any of the
  GPU's devices counts: the GPU itself, a replica, or one of its MIG devices.
- Counters (ECC errors, XID events) carry only the GPU's labels: their values
  span the GPU's life, not a pod's.
- A GPU that NVML cannot read any more (lost, or another GPU now at its index)
  has no sensor series; its health and XID counters stay, since the kubelet
  still lists it (Unhealthy). A sensor the GPU lacks is left out quietly; any
  other failing read leaves that one series out and counts a telemetry error.

Runs in the metrics server's worker thread; NVML is thread-safe, and the
backend's device map and the monitor's fault map are read as whole snapshots.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from accel_plugins.backends.nvidia.discovery import Gpu
from accel_plugins.backends.nvidia.errors import GpuLostError, NvmlError, NvmlNotSupportedError
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.health import HealthMonitor
from accel_plugins.backends.nvidia.nvml import Handle, Nvml, Utilization
from accel_plugins.plugin.backend import Holders, PodRef
from accel_plugins.plugin.device import Device

log = logging.getLogger(__name__)

PREFIX = "accel_plugins_gpu"
GPU_LABELS = ("uuid", "index", "model")
POD_LABELS = ("namespace", "pod", "container")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's sensors as of now; None where the sensor is missing or failed."""

    gpu: Gpu
    utilization: Utilization | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    temperature: int | None = None
    power: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None


class _VanishedError(Exception):
    """The GPU stopped answering in the middle of a reading."""


class GpuTelemetry:
    """Reads the GPUs' sensors through the NVML adapter and counts failed reads."""

    def __init__(self, nvml: Nvml) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._errors: dict[tuple[str, str], int] = {}  # (GPU UUID, metric) -> failed reads

    def errors(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._errors)

    def read(self, gpu: Gpu) -> GpuReading | None:
        """The GPU's sensors, or None when NVML no longer knows it at its index."""
        nvml = self._nvml
        try:
            handle = nvml.device_handle(gpu.index)
            if nvml.uuid(handle) != gpu.uuid:
                return None
            return GpuReading(
                gpu=gpu,
                utilization=self._sensor(gpu, "utilization", lambda: nvml.utilization(handle)),
                memory_used=self._sensor(gpu, "memory_used", lambda: nvml.memory_used(handle)),
                memory_total=self._sensor(gpu, "memory_total", lambda: nvml.memory_total(handle)),
                temperature=self._sensor(gpu, "temperature", lambda: nvml.temperature(handle)),
                power=self._sensor(gpu, "power", lambda: nvml.power_usage(handle)),
                ecc_corrected=self._ecc(gpu, handle, corrected=True),
                ecc_uncorrected=self._ecc(gpu, handle, corrected=False),
            )
        except (NvmlError, _VanishedError):
            return None

    def _ecc(self, gpu: Gpu, handle: Handle, *, corrected: bool) -> int | None:
        name = "ecc_corrected" if corrected else "ecc_uncorrected"
        return self._sensor(gpu, name, lambda: self._nvml.ecc_errors(handle, corrected=corrected))

    def _sensor(self, gpu: Gpu, metric: str, read: Callable[[], T]) -> T | None:
        try:
            return read()
        except NvmlNotSupportedError:
            return None  # this GPU has no such sensor (ECC off, MIG mode): not an error
        except GpuLostError as exc:
            raise _VanishedError from exc
        except NvmlError as exc:
            with self._lock:
                key = (gpu.uuid, metric)
                self._errors[key] = self._errors.get(key, 0) + 1
            log.debug("GPU %s: reading %s failed: %s", gpu.uuid, metric, exc)
            return None

    def collect(
        self,
        monitor: HealthMonitor | None,
        resources: Mapping[str, Sequence[Device]],
        holders: Holders,
    ) -> list[Metric]:
        """Every GPU series, read now; nothing before the backend has discovered GPUs."""
        if monitor is None:
            return []
        gpus = monitor.gpus
        readings = [self.read(g) for g in gpus]
        return families(
            gpus,
            [r for r in readings if r is not None],
            unhealthy=unhealthy_gpus(monitor),
            holders=gpu_holders(resources, holders),
            xids=monitor.xid_counts(),
            errors=self.errors(),
        )


def unhealthy_gpus(monitor: HealthMonitor) -> set[str]:
    """UUIDs of GPUs that are faulty themselves or through one of their MIG devices."""
    faults = monitor.faults
    parents = {monitor.parent_of(unit) for unit in faults}
    return {u for u in (*faults, *parents) if u is not None}


def gpu_holders(
    resources: Mapping[str, Sequence[Device]], holders: Holders
) -> dict[str, tuple[PodRef, ...]]:
    """GPU UUID -> containers holding the GPU, one of its replicas or MIG devices."""
    found: dict[str, set[PodRef]] = {}
    for resource, devices in resources.items():
        for device in devices:
            refs = holders(resource, device.id)
            if not refs:
                continue
            found.setdefault(gpu_facts(device).gpu_uuid, set()).update(refs)
    return {gpu: tuple(sorted(refs)) for gpu, refs in found.items()}


def _pods(refs: Sequence[PodRef]) -> list[tuple[str, str, str]]:
    return [(r.namespace, r.pod, r.container) for r in refs] or [("", "", "")]


def families(
    gpus: Iterable[Gpu],
    readings: Iterable[GpuReading],
    *,
    unhealthy: set[str],
    holders: Mapping[str, Sequence[PodRef]],
    xids: Mapping[tuple[str, int], int],
    errors: Mapping[tuple[str, str], int],
) -> list[Metric]:
    """The metric families of the readings (sensors) and of every known GPU (the rest)."""
    labels = [*GPU_LABELS, *POD_LABELS]

    def gauge(name: str, text: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(f"{PREFIX}_{name}", text, labels=labels)

    utilization = gauge(
        "utilization_ratio", "Share of the last sample period in which a kernel ran (0-1)."
    )
    memory_busy = gauge(
        "memory_utilization_ratio",
        "Share of the last sample period in which device memory was read or written (0-1).",
    )
    memory_used = gauge("memory_used_bytes", "Framebuffer memory in use.")
    memory_total = gauge("memory_total_bytes", "Framebuffer memory in all.")
    temperature = gauge("temperature_celsius", "GPU die temperature.")
    power = gauge("power_watts", "Board power draw.")
    healthy = gauge(
        "healthy", "1 while the plugin reports the GPU Healthy, 0 while Unhealthy (e.g. an XID)."
    )
    ecc = CounterMetricFamily(
        f"{PREFIX}_ecc_errors",
        "ECC errors since the driver loaded, by type (corrected, uncorrected).",
        labels=[*GPU_LABELS, "type"],
    )
    xid = CounterMetricFamily(
        f"{PREFIX}_xid_events",
        "XID events reported by NVML since the plugin started, ignored ones included.",
        labels=[*GPU_LABELS, "xid"],
    )
    failed = CounterMetricFamily(
        f"{PREFIX}_telemetry_errors",
        "NVML reads for these series that failed (the series was left out of that scrape).",
        labels=[*GPU_LABELS, "metric"],
    )

    def ident(gpu: Gpu) -> list[str]:
        return [gpu.uuid, str(gpu.index), gpu.name]

    for reading in readings:
        gpu = reading.gpu
        for pod in _pods(holders.get(gpu.uuid, ())):
            values = [*ident(gpu), *pod]
            if reading.utilization is not None:
                utilization.add_metric(values, reading.utilization.gpu / 100)
                memory_busy.add_metric(values, reading.utilization.memory / 100)
            if reading.memory_used is not None:
                memory_used.add_metric(values, reading.memory_used)
            if reading.memory_total is not None:
                memory_total.add_metric(values, reading.memory_total)
            if reading.temperature is not None:
                temperature.add_metric(values, reading.temperature)
            if reading.power is not None:
                power.add_metric(values, reading.power)
        if reading.ecc_corrected is not None:
            ecc.add_metric([*ident(gpu), "corrected"], reading.ecc_corrected)
        if reading.ecc_uncorrected is not None:
            ecc.add_metric([*ident(gpu), "uncorrected"], reading.ecc_uncorrected)
    known = {g.uuid: g for g in gpus}
    for gpu in known.values():
        for pod in _pods(holders.get(gpu.uuid, ())):
            healthy.add_metric([*ident(gpu), *pod], 0 if gpu.uuid in unhealthy else 1)
    for (uuid, number), count in sorted(xids.items()):
        if uuid in known:
            xid.add_metric([*ident(known[uuid]), str(number)], count)
    for (uuid, metric), count in sorted(errors.items()):
        if uuid in known:
            failed.add_metric([*ident(known[uuid]), metric], count)
    return [
        utilization,
        memory_busy,
        memory_used,
        memory_total,
        temperature,
        power,
        healthy,
        ecc,
        xid,
        failed,
    ]
