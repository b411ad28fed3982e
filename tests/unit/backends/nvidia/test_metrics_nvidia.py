"""Per-GPU series of the NVIDIA backend over the simulated NVML (``collect_metrics``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest
from prometheus_client.metrics_core import Metric

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.config.config import share_all
from accel_plugins.backends.nvidia.errors import NvmlError
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml, TelemetryValue
from accel_plugins.plugin.backend import MetricsProvider, PodRef
from tests.fixtures.nvidia import RunNvidia, simulated_backend, watching

Labels = tuple[tuple[str, str], ...]
GIB = 1024**3


def nobody(resource: str, device_id: str) -> Sequence[PodRef]:
    return ()


def samples(families: Iterable[Metric]) -> dict[tuple[str, Labels], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def of(values: dict[tuple[str, Labels], float], name: str, **match: str) -> dict[Labels, float]:
    """Samples of ``name`` whose labels include ``match``."""
    return {
        labels: v
        for (n, labels), v in values.items()
        if n == name and set(match.items()) <= set(labels)
    }


def gpu(nvml: SimulatedNvml, index: int) -> dict[str, str]:
    spec = nvml.profile.gpus[index]
    return {"uuid": spec.uuid, "index": str(index), "model": spec.name}


async def started(
    run_nvidia: RunNvidia, spec: str = "pcie-4gpu", **options: object
) -> tuple[NvidiaBackend, SimulatedNvml]:
    backend, nvml = simulated_backend(spec, **options)
    await run_nvidia(backend)
    await watching(backend)
    return backend, nvml


async def test_every_gpu_reports_its_sensors(run_nvidia: RunNvidia) -> None:
    backend, nvml = await started(run_nvidia)
    assert isinstance(backend, MetricsProvider)
    nvml.set_telemetry(
        1,
        utilization_gpu=75,
        utilization_memory=20,
        memory_used_bytes=3 * GIB,
        temperature_celsius=71,
        power_watts=250.5,
        ecc_corrected=3,
        ecc_uncorrected=1,
    )
    values = samples(backend.collect_metrics(nobody))
    one = gpu(nvml, 1)
    pods = {"namespace": "", "pod": "", "container": ""}
    expected = {
        "accel_plugins_gpu_utilization_ratio": 0.75,
        "accel_plugins_gpu_memory_utilization_ratio": 0.2,
        "accel_plugins_gpu_memory_used_bytes": 3 * GIB,
        "accel_plugins_gpu_memory_total_bytes": 46068 * 1024**2,
        "accel_plugins_gpu_temperature_celsius": 71,
        "accel_plugins_gpu_power_watts": 250.5,
        "accel_plugins_gpu_healthy": 1,
    }
    for name, value in expected.items():
        assert of(values, name, **one) == {tuple(sorted({**one, **pods}.items())): value}, name
        assert len(of(values, name)) == 4, name  # one series per GPU
    assert of(values, "accel_plugins_gpu_ecc_errors_total", **one) == {
        tuple(sorted({**one, "type": "corrected"}.items())): 3,
        tuple(sorted({**one, "type": "uncorrected"}.items())): 1,
    }
    assert of(values, "accel_plugins_gpu_telemetry_errors_total") == {}


@pytest.mark.parametrize(
    ("sensor", "series"),
    [
        pytest.param("utilization_gpu", "accel_plugins_gpu_utilization_ratio", id="utilization"),
        pytest.param("memory_used_bytes", "accel_plugins_gpu_memory_used_bytes", id="memory"),
        pytest.param(
            "temperature_celsius", "accel_plugins_gpu_temperature_celsius", id="temperature"
        ),
        pytest.param("power_watts", "accel_plugins_gpu_power_watts", id="power"),
        pytest.param("ecc_corrected", "accel_plugins_gpu_ecc_errors_total", id="ecc"),
    ],
)
@pytest.mark.parametrize(
    ("value", "counted"),
    [
        pytest.param(None, False, id="not-supported"),
        pytest.param(NvmlError("nvmlDeviceGetX", 999, "Unknown Error"), True, id="failing"),
    ],
)
async def test_a_sensor_that_cannot_be_read_leaves_only_its_series_out(
    run_nvidia: RunNvidia, sensor: str, series: str, value: TelemetryValue, counted: bool
) -> None:
    backend, nvml = await started(run_nvidia)
    nvml.set_telemetry(2, **{sensor: value})
    values = samples(backend.collect_metrics(nobody))
    two = gpu(nvml, 2)
    if series.endswith("_total"):
        assert of(values, series, **two, type="corrected") == {}
        assert len(of(values, series, **two)) == 1  # uncorrected still there
    else:
        assert of(values, series, **two) == {}
    assert len(of(values, series, index="1")) >= 1  # the other GPUs keep theirs
    assert len(of(values, "accel_plugins_gpu_temperature_celsius")) == (
        3 if sensor == "temperature_celsius" else 4
    )
    errors = of(values, "accel_plugins_gpu_telemetry_errors_total")
    assert sum(errors.values()) == (1 if counted else 0)


async def test_a_lost_gpu_keeps_health_and_xids_but_no_sensors(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("pcie-4gpu")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(0, 48)  # double-bit ECC: critical
    nvml.inject_xid(0, 13)  # an application error: counted, but ignored by the health policy
    nvml.lose_gpu(3)
    lost = nvml.profile.gpus[3].uuid
    first = nvml.profile.gpus[0].uuid
    await recorder.wait_for(
        lambda t: not t["nvidia.com/gpu"][lost].healthy and not t["nvidia.com/gpu"][first].healthy
    )
    values = samples(backend.collect_metrics(nobody))
    assert of(values, "accel_plugins_gpu_temperature_celsius", uuid=lost) == {}
    assert len(of(values, "accel_plugins_gpu_temperature_celsius")) == 3
    health = {dict(k)["index"]: v for k, v in of(values, "accel_plugins_gpu_healthy").items()}
    assert health == {"0": 0, "1": 1, "2": 1, "3": 0}
    xids = {
        (dict(k)["index"], dict(k)["xid"]): v
        for k, v in of(values, "accel_plugins_gpu_xid_events_total").items()
    }
    assert xids == {("0", "13"): 1, ("0", "48"): 1, ("3", "79"): 1}

    nvml.restore_gpu(3)  # answers again: its sensors are back at the next scrape
    values = samples(backend.collect_metrics(nobody))
    assert len(of(values, "accel_plugins_gpu_temperature_celsius", uuid=lost)) == 1


async def test_gpu_series_name_every_pod_holding_the_gpu(run_nvidia: RunNvidia) -> None:
    backend, nvml = await started(run_nvidia, sharing=share_all(2))
    zero = nvml.profile.gpus[0].uuid
    held = {
        ("nvidia.com/gpu", f"{zero}::0"): (PodRef("ml", "train", "main"),),
        ("nvidia.com/gpu", f"{zero}::1"): (PodRef("ml", "infer", "server"),),
    }

    def holders(resource: str, device_id: str) -> Sequence[PodRef]:
        return held.get((resource, device_id), ())

    values = samples(backend.collect_metrics(holders))
    power = of(values, "accel_plugins_gpu_power_watts", uuid=zero)
    assert {(dict(k)["namespace"], dict(k)["pod"], dict(k)["container"]) for k in power} == {
        ("ml", "infer", "server"),
        ("ml", "train", "main"),
    }
    assert of(values, "accel_plugins_gpu_power_watts", index="1", pod="") != {}
    # Counters are the GPU's, not a pod's: one series whatever holds it.
    assert len(of(values, "accel_plugins_gpu_ecc_errors_total", uuid=zero)) == 2


async def test_a_mig_device_attributes_its_gpu(run_nvidia: RunNvidia) -> None:
    backend, _ = await started(run_nvidia, "a100-mig", mig_strategy="mixed")
    tree = backend.snapshot()
    (mig_id, mig), *_ = tree["nvidia.com/mig-1g.5gb"].items()
    parent = str(gpu_facts(mig).parent_uuid)

    def holders(resource: str, device_id: str) -> Sequence[PodRef]:
        return (PodRef("default", "p", "c"),) if device_id == mig_id else ()

    values = samples(backend.collect_metrics(holders))
    health = of(values, "accel_plugins_gpu_healthy", uuid=parent)
    assert [dict(k)["pod"] for k in health] == ["p"]


def test_unknown_telemetry_names_are_refused() -> None:
    _, nvml = simulated_backend("pcie-4gpu")
    with pytest.raises(TypeError, match="temperature"):
        nvml.set_telemetry(0, temprature=3)
