"""A simulated NVIDIA node's /metrics over real HTTP, against the kubelet emulator."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sys
from pathlib import Path

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.container_contract import generated_mig_minors
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.backends.nvidia.simulate.simulated_profile import SimEvent
from accel_plugins.kubelet_emulator import Kubelet
from tests.fixtures.nvidia import profile, settings, simulated_backend
from tests.support.cli import free_port
from tests.support.metrics import MetricsNode, Samples, get, parse, promtool_check, series

GPU = "nvidia.com/gpu"
SENSORS = (
    "accel_plugins_gpu_utilization_ratio",
    "accel_plugins_gpu_memory_utilization_ratio",
    "accel_plugins_gpu_memory_used_bytes",
    "accel_plugins_gpu_memory_total_bytes",
    "accel_plugins_gpu_temperature_celsius",
    "accel_plugins_gpu_power_watts",
    "accel_plugins_gpu_healthy",
)


def by_gpu(values: Samples, name: str) -> dict[str, tuple[str, float]]:
    """index -> (pod, value) of one GPU gauge."""
    return {dict(k)["index"]: (dict(k)["pod"], v) for k, v in series(values, name).items()}


async def test_every_gpu_has_its_series_and_the_pod_holding_it(kubelet: Kubelet) -> None:
    backend, nvml = simulated_backend("pcie-4gpu")
    nvml.set_telemetry(2, utilization_gpu=93, power_watts=301.0)
    socket_path = kubelet.pod_resources_socket
    async with MetricsNode(
        lambda: backend, kubelet.plugin_dir, pod_resources_socket=socket_path
    ) as node:
        await kubelet.wait_for_resource(GPU, allocatable=4)
        record = await kubelet.allocate("train", "main", GPU, 1, namespace="ml")
        (held,) = record.device_ids
        index = str(next(i for i, g in enumerate(nvml.profile.gpus) if g.uuid == held))
        await node.attribution()
        status, text = await node.get("/metrics")
        assert status == 200
        promtool_check(text)
    values = parse(text)
    for name in SENSORS:
        gpus = by_gpu(values, name)
        assert sorted(gpus) == ["0", "1", "2", "3"], name
        assert {i for i, (pod, _) in gpus.items() if pod} == {index}, name
    assert by_gpu(values, "accel_plugins_gpu_utilization_ratio")["2"][1] == 0.93
    assert by_gpu(values, "accel_plugins_gpu_power_watts")["2"][1] == 301.0
    models = {dict(k)["model"] for k in series(values, "accel_plugins_gpu_healthy")}
    assert models == {"NVIDIA L40S"}
    device = {
        dict(k)["device"]: dict(k)["pod"]
        for k in series(values, "accel_plugins_device_healthy")
        if dict(k)["resource"] == GPU
    }
    assert device[held] == "train"


async def test_a_scripted_xid_counts_and_marks_the_gpu(kubelet: Kubelet) -> None:
    node_profile = dataclasses.replace(
        profile("pcie-4gpu"), events=(SimEvent(at=0.0, gpu=1, xid=48),)
    )
    nvml = SimulatedNvml(node_profile)
    backend = NvidiaBackend(nvml, settings(), mig_minors=generated_mig_minors(4), wait_ms=50)
    faulty = node_profile.gpus[1].uuid
    async with MetricsNode(lambda: backend, kubelet.plugin_dir) as node:
        await kubelet.wait_for_resource(GPU)
        await kubelet.wait_for(lambda k: k.resources[GPU].unhealthy == [faulty])
        status, text = await node.get("/metrics")
        assert status == 200
        promtool_check(text)
    values = parse(text)
    xids = {
        (dict(k)["index"], dict(k)["xid"]): v
        for k, v in series(values, "accel_plugins_gpu_xid_events_total").items()
    }
    assert xids == {("1", "48"): 1}
    health = {i: v for i, (_, v) in by_gpu(values, "accel_plugins_gpu_healthy").items()}
    assert health == {"0": 1, "1": 0, "2": 1, "3": 1}
    assert (
        series(values, "accel_plugins_devices")[(("health", "Unhealthy"), ("resource", GPU))] == 1
    )


async def healthz_within(url: str, timeout: float) -> tuple[int, str]:
    """/healthz of another process, asked until 200 or ``timeout``.

    The plugin marks itself registered when Register's answer arrives, which
    no event of ours can await across processes: a bounded poll is the only way.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        answer = await asyncio.to_thread(get, f"{url}/healthz")
        if answer[0] == 200 or asyncio.get_running_loop().time() > deadline:
            return answer
        await asyncio.sleep(0.05)


async def test_the_nvidia_command_serves_metrics_and_health(
    kubelet: Kubelet, tmp_path: Path
) -> None:
    """The wiring of ``accel-plugins nvidia`` itself: registry, recorder, attribution."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "accel_plugins.cli.main",
        "nvidia",
        "--simulate",
        "pcie-4gpu",
        "--plugin-dir",
        str(kubelet.plugin_dir),
        "--pod-resources-socket",
        str(kubelet.pod_resources_socket),
        "--metrics-address",
        f"127.0.0.1:{port}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await kubelet.wait_for_resource(GPU, allocatable=4, timeout=20)
        await kubelet.allocate("train", "main", GPU, 2, namespace="ml")
        url = f"http://127.0.0.1:{port}"
        health = await healthz_within(url, 10.0)
        values = parse((await asyncio.to_thread(get, f"{url}/metrics"))[1])
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    assert health == (200, "ok\n")
    res = ("resource", GPU)
    assert series(values, "accel_plugins_allocations_total") == {(res,): 1}
    assert series(values, "accel_plugins_allocated_devices_total") == {(res,): 2}
    assert len(series(values, "accel_plugins_gpu_temperature_celsius")) == 4
