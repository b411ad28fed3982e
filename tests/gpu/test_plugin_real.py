"""``accel-plugins nvidia`` as a process on the real driver, against the kubelet emulator.

Run on a GPU machine with ``pytest tests/gpu``; everything skips without a driver or
a GPU. The expectations come from outside the plugin: the GPUs NVML lists in this
test process, the device nodes under ``/dev``, what ``ldconfig -p`` resolves, and what
``nvidia-cuda-mps-control`` itself answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.discovery import Node as GpuNode
from accel_plugins.kubelet_emulator import Kubelet
from tests.reliability.plugin_process import START_TIMEOUT, Node, PluginProcesses, ready
from tests.reliability.test_mps_process import CONFIG as MPS_CONFIG
from tests.support.cdi import assert_valid_spec_file, schema_dir
from tests.support.cli import free_port
from tests.support.metrics import get, parse, series

GPU = "nvidia.com/gpu"
# Where the plugins started here find the driver: / on a GPU node; the mock driver root
# that hack/mock-gpu-check lays out for NVIDIA's mock NVML (the flag's environment twin).
DRIVER_ROOT = Path(os.environ.get("NVIDIA_DRIVER_ROOT", "/"))
CDI_VENDOR = "k8s.device-plugin.nvidia.com"


@pytest.fixture
async def plugins(kubelet_dir: Path, tmp_path: Path) -> AsyncIterator[PluginProcesses]:
    processes = PluginProcesses(kubelet_dir, tmp_path)
    yield processes
    await processes.stop_all()


@pytest.fixture
def whole_gpus(gpus: GpuNode) -> int:
    """How many GPUs are not in MIG mode (the tests skip when none is)."""
    count = sum(1 for g in gpus.gpus if not g.mig_enabled)
    if count == 0:
        pytest.skip("every GPU here is in MIG mode")
    return count


async def stop(processes: PluginProcesses, proc: asyncio.subprocess.Process) -> str:
    """SIGTERM, expect a clean exit, return the log."""
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(START_TIMEOUT):
        code = await proc.wait()
    log = processes.output(proc)
    assert code == 0, log
    assert "Traceback" not in log, log
    return log


async def test_every_gpu_registers_healthy_and_is_handed_out_by_uuid(
    kubelet: Kubelet, plugins: PluginProcesses, gpus: GpuNode, whole_gpus: int
) -> None:
    port = free_port()
    node = Node(["nvidia", "--metrics-address", f"127.0.0.1:{port}"], GPU, whole_gpus)
    proc = await plugins.spawn(node, "--pass-device-specs", "true")
    await kubelet.wait_for(ready(node), START_TIMEOUT)

    view = kubelet.resources[GPU]
    uuids = {g.uuid for g in gpus.gpus if not g.mig_enabled}
    assert set(view.healthy) == uuids
    for gpu in gpus.gpus:
        if gpu.uuid in view.devices:
            numa = view.devices[gpu.uuid].numa_nodes
            assert numa == (() if gpu.numa_node is None else (gpu.numa_node,)), gpu.uuid

    record = await kubelet.allocate("cuda", "main", GPU, 1, namespace="gpu-check")
    envs = dict(record.response.envs)
    (uuid,) = envs["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert uuid in uuids
    minor = next(g.minor for g in gpus.gpus if g.uuid == uuid)
    host_paths = {d.host_path for d in record.response.devices}
    assert str(DRIVER_ROOT / f"dev/nvidia{minor}") in host_paths
    assert all(Path(p).exists() for p in host_paths), host_paths

    status, text = await asyncio.to_thread(get, f"http://127.0.0.1:{port}/metrics")
    assert status == 200, text
    values = parse(text)
    temperatures = series(values, "accel_plugins_gpu_temperature_celsius")
    assert len(temperatures) == len(gpus.gpus)
    assert all(1 <= v <= 130 for v in temperatures.values()), temperatures
    healthy = series(values, "accel_plugins_gpu_healthy")
    assert set(healthy.values()) == {1.0}, healthy
    await stop(plugins, proc)


def ldconfig_paths(soname: str) -> list[str]:
    """Where the host's ``ldconfig -p`` resolves ``soname`` (empty when it does not)."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if not Path(ldconfig).exists():
        return []
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=True).stdout
    return [
        line.rsplit("=>", 1)[1].strip()
        for line in out.splitlines()
        if line.strip().startswith(soname + " ") and "x86-64" in line
    ]


@pytest.mark.skipif(schema_dir() is None, reason="no CDI schema here (set CDI_SCHEMA_DIR)")
async def test_cdi_specs_describe_the_real_driver(
    kubelet: Kubelet, plugins: PluginProcesses, gpus: GpuNode, whole_gpus: int, tmp_path: Path
) -> None:
    spec_dir = tmp_path / "cdi"
    node = Node(["nvidia", "--metrics-address", ""], GPU, whole_gpus)
    argv = ["--device-list-strategy", "cdi-cri", "--cdi-spec-dir", str(spec_dir)]
    proc = await plugins.spawn(node, *argv, "--nvidia-cdi-hook-path", "")
    await kubelet.wait_for(ready(node), START_TIMEOUT)

    record = await kubelet.allocate("cuda", "main", GPU, 1, namespace="gpu-check")
    (name,) = record.response.cdi_devices
    assert re.match(rf"^{CDI_VENDOR}/gpu=GPU-[0-9a-f-]+$", name), name

    specs = [assert_valid_spec_file(path) for path in sorted(spec_dir.glob("*.json"))]
    assert specs, "no spec written"
    names = {f"{s['kind']}={d['name']}" for s in specs for d in s["devices"]}
    assert name in names
    edits = [s.get("containerEdits", {}) for s in specs]
    edits += [d["containerEdits"] for s in specs for d in s["devices"]]
    nodes = {n["path"] for e in edits for n in e.get("deviceNodes", [])}
    for gpu in gpus.gpus:
        assert f"/dev/nvidia{gpu.minor}" in nodes
    assert "/dev/nvidiactl" in nodes
    on_host = {n.get("hostPath", n["path"]) for e in edits for n in e.get("deviceNodes", [])}
    assert all(Path(n).exists() for n in on_host), on_host
    mounted = {m["hostPath"] for e in edits for m in e.get("mounts", [])}
    assert all(Path(m).exists() for m in mounted), sorted(mounted)
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1"):
        # Each library the host's linker cache knows must reach the container.
        for path in ldconfig_paths(soname):
            assert os.path.realpath(path) in {os.path.realpath(m) for m in mounted}, path
    print(json.dumps(sorted(mounted), indent=1))

    await stop(plugins, proc)
    assert not list(spec_dir.glob("*.json")), "specs left behind after exit"


async def run_program(
    argv: list[str], env: dict[str, str], stdin: str = ""
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(120):
        out, err = await proc.communicate(stdin.encode())
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


CUDA_CLIENT = """\
import torch
x = torch.ones(1024, device="cuda")
print(float(x.sum()))
"""


@pytest.mark.skipif(
    shutil.which("nvidia-cuda-mps-control") is None, reason="no nvidia-cuda-mps-control here"
)
async def test_mps_daemon_serves_a_cuda_client_through_the_allocated_pipe(
    kubelet: Kubelet, plugins: PluginProcesses, whole_gpus: int, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(MPS_CONFIG)  # every GPU MPS-shared, 2 replicas
    common = ["--config", str(config), "--mps-root", str(tmp_path / "mps")]
    node = Node(["nvidia", *common, "--metrics-address", ""], GPU, 2 * whole_gpus)
    await plugins.spawn(node)
    with (tmp_path / "daemon.log").open("wb") as daemon_log:
        daemon = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "accel_plugins.cli.main",
            "mps-control-daemon",
            *common,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=daemon_log,
            stderr=daemon_log,
        )
    try:
        await kubelet.wait_for(ready(node), 60)
        record = await kubelet.allocate("cuda", "main", GPU, 1, namespace="gpu-check")
        envs = dict(record.response.envs)
        pipe = envs["CUDA_MPS_PIPE_DIRECTORY"]
        (mount,) = [m for m in record.response.mounts if m.container_path == pipe]
        assert Path(mount.host_path).is_dir()

        # The container's view: the pipe where the env says, the GPU visible. A CUDA
        # client (torch, where this interpreter has it) must reach a server through it.
        env = os.environ | {
            "CUDA_MPS_PIPE_DIRECTORY": mount.host_path,
            "CUDA_VISIBLE_DEVICES": envs["NVIDIA_VISIBLE_DEVICES"],
        }
        code, out, err = await run_program([sys.executable, "-c", CUDA_CLIENT], env)
        if "No module named 'torch'" not in err:
            assert code == 0, err
            assert out.strip() == "1024.0"
            control_env = os.environ | {"CUDA_MPS_PIPE_DIRECTORY": mount.host_path}
            _, out, err = await run_program(
                ["nvidia-cuda-mps-control"], control_env, "get_server_list\n"
            )
            assert out.split(), (out, err)  # the PID of the server our client started

        daemon.send_signal(signal.SIGTERM)
        async with asyncio.timeout(START_TIMEOUT):
            assert await daemon.wait() == 0
    finally:
        if daemon.returncode is None:
            daemon.kill()
            await daemon.wait()
    log = (tmp_path / "daemon.log").read_text()
    assert "Traceback" not in log, log
