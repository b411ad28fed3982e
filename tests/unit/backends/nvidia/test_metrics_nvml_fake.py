"""GPU telemetry through the real pynvml bindings, against the fake libnvidia-ml.so.1.

See tests/nvml_fake/fake_nvml.c for the table format (``telemetry`` records).
These tests skip when gcc is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.errors import NvmlError, NvmlNotSupportedError
from accel_plugins.backends.nvidia.nvml import Pynvml, Utilization, session
from accel_plugins.plugin.backend import PodRef
from tests.fixtures.nvidia import FakeNvml, RunNvidia, settings, watching

UUID0 = "GPU-00000000-1111-2222-3333-444444444444"
UUID1 = "GPU-55555555-6666-7777-8888-999999999999"
GPUS = (
    f"gpu {UUID0} 0 81920 00000000:07:00.0 0 0 NVIDIA A100-SXM4-80GB",
    f"gpu {UUID1} 1 81920 00000000:0F:00.0 1 0 NVIDIA A100-SXM4-80GB",
)
SENSORS = (
    "telemetry 0 util_gpu 87",
    "telemetry 0 util_mem 41",
    "telemetry 0 mem_used 1073741824",
    "telemetry 0 temp 66",
    "telemetry 0 power_mw 312250",
    "telemetry 0 ecc_corrected 5",
    "telemetry 0 ecc_uncorrected 2",
)

Read = Callable[[Pynvml, object], object]


def test_sensors_read_through_the_real_bindings(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(*GPUS, *SENSORS)
    nvml = fake_nvml.adapter()
    with session(nvml):
        handle = nvml.device_handle(0)
        assert nvml.utilization(handle) == Utilization(gpu=87, memory=41)
        assert nvml.memory_used(handle) == 1024**3
        assert nvml.memory_total(handle) == 81920 * 1024**2
        assert nvml.temperature(handle) == 66
        assert nvml.power_usage(handle) == 312.25  # NVML answers in milliwatts
        assert nvml.ecc_errors(handle, corrected=True) == 5
        assert nvml.ecc_errors(handle, corrected=False) == 2


@pytest.mark.parametrize(
    ("key", "read"),
    [
        pytest.param("util_gpu", lambda n, h: n.utilization(h), id="utilization"),
        pytest.param("temp", lambda n, h: n.temperature(h), id="temperature"),
        pytest.param("power_mw", lambda n, h: n.power_usage(h), id="power"),
        pytest.param("ecc_corrected", lambda n, h: n.ecc_errors(h, corrected=True), id="ecc"),
    ],
)
@pytest.mark.parametrize(
    ("value", "error", "call"),
    [
        pytest.param("na", NvmlNotSupportedError, "Not Supported", id="not-supported"),
        pytest.param("err", NvmlError, "Unknown Error", id="failing"),
    ],
)
def test_missing_and_failing_sensors_raise_our_errors(
    fake_nvml: FakeNvml, key: str, read: Read, value: str, error: type[NvmlError], call: str
) -> None:
    fake_nvml.write(*GPUS, f"telemetry 1 {key} {value}")
    nvml = fake_nvml.adapter()
    with session(nvml):
        handle = nvml.device_handle(1)
        with pytest.raises(error, match=call):
            read(nvml, handle)


async def test_backend_metrics_on_the_real_bindings(
    fake_nvml: FakeNvml, run_nvidia: RunNvidia
) -> None:
    fake_nvml.write(*GPUS, *SENSORS, "telemetry 1 temp err", "event 1 79 -1 -1")
    backend = NvidiaBackend(fake_nvml.adapter(), settings(), wait_ms=20)
    recorder = await run_nvidia(backend)
    await watching(backend)
    await recorder.wait_for(lambda t: not t["nvidia.com/gpu"][UUID1].healthy)

    def holders(resource: str, device_id: str) -> Sequence[PodRef]:
        return (PodRef("default", "train", "main"),) if device_id == UUID0 else ()

    values = {
        (s.name, s.labels.get("index"), s.labels.get("pod"), s.labels.get("type", "")): s.value
        for family in backend.collect_metrics(holders)
        for s in family.samples
    }
    assert values[("accel_plugins_gpu_utilization_ratio", "0", "train", "")] == 0.87
    assert values[("accel_plugins_gpu_power_watts", "0", "train", "")] == 312.25
    assert values[("accel_plugins_gpu_memory_used_bytes", "0", "train", "")] == 1024**3
    assert values[("accel_plugins_gpu_ecc_errors_total", "0", None, "uncorrected")] == 2
    # GPU 1: no sensors configured (not supported), temperature failing, an XID 79.
    assert ("accel_plugins_gpu_temperature_celsius", "1", "", "") not in values
    assert ("accel_plugins_gpu_utilization_ratio", "1", "", "") not in values
    assert values[("accel_plugins_gpu_memory_used_bytes", "1", "", "")] == 0
    assert values[("accel_plugins_gpu_healthy", "1", "", "")] == 0
    assert values[("accel_plugins_gpu_xid_events_total", "1", None, "")] == 1
    assert values[("accel_plugins_gpu_telemetry_errors_total", "1", None, "")] == 1
