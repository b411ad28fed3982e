"""GPU telemetry through the pynvml adapter on a real GPU; skipped where there is none.

Run on a GPU machine with ``pytest tests/gpu``. Values are checked against
physical bounds, not a particular model; a sensor the GPU lacks must raise
NvmlNotSupportedError (and is then left out of the scrape), nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from accel_plugins.backends.nvidia.discovery import discover
from accel_plugins.backends.nvidia.errors import NvmlNotSupportedError
from accel_plugins.backends.nvidia.nvml import Handle, Pynvml
from accel_plugins.backends.nvidia.telemetry import GpuTelemetry


def sensor(read: Callable[[], float]) -> float | None:
    try:
        return read()
    except NvmlNotSupportedError:
        return None


@pytest.mark.parametrize(
    ("read", "low", "high"),
    [
        pytest.param(lambda n, h: n.utilization(h).gpu, 0, 100, id="utilization"),
        pytest.param(lambda n, h: n.utilization(h).memory, 0, 100, id="memory-utilization"),
        pytest.param(lambda n, h: n.temperature(h), 1, 130, id="temperature"),
        pytest.param(lambda n, h: n.power_usage(h), 1, 2000, id="power-watts"),
        pytest.param(lambda n, h: n.ecc_errors(h, corrected=True), 0, 2**64, id="ecc-corrected"),
        pytest.param(lambda n, h: n.ecc_errors(h, corrected=False), 0, 2**64, id="ecc-uncorr"),
    ],
)
def test_sensors_are_within_physical_bounds(
    nvml: Pynvml, read: Callable[[Pynvml, Handle], float], low: float, high: float
) -> None:
    for index in range(nvml.device_count()):
        handle = nvml.device_handle(index)
        value = sensor(lambda h=handle: read(nvml, h))  # type: ignore[misc]
        assert value is None or low <= value <= high, (index, value)


def test_memory_used_fits_in_total(nvml: Pynvml) -> None:
    for index in range(nvml.device_count()):
        handle = nvml.device_handle(index)
        assert 0 <= nvml.memory_used(handle) <= nvml.memory_total(handle)


def test_every_gpu_has_a_reading(nvml: Pynvml) -> None:
    telemetry = GpuTelemetry(nvml)
    for gpu in discover(nvml).gpus:
        reading = telemetry.read(gpu)
        assert reading is not None, gpu.uuid
        assert reading.memory_total is not None
        assert reading.memory_total >= gpu.memory_mib * 1024**2
    assert telemetry.errors() == {}
