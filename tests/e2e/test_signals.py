"""A plugin process and its signals: SIGTERM/SIGINT stop cleanly, SIGHUP reloads."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.kubelet_emulator import Kubelet

ROOT = Path(__file__).resolve().parents[2]
WIDGET = "example.com/widget"


class PluginProcesses:
    """Starts tests/e2e/sample_plugin.py processes; ``spec`` is their config file."""

    def __init__(self, plugin_dir: Path, spec: Path) -> None:
        self.plugin_dir = plugin_dir
        self.spec = spec
        self.procs: list[asyncio.subprocess.Process] = []

    async def spawn(self, counts: dict[str, int]) -> asyncio.subprocess.Process:
        self.spec.write_text(json.dumps(counts))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.e2e.sample_plugin",
            str(self.plugin_dir),
            str(self.spec),
            cwd=ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self.procs.append(proc)
        return proc


@pytest.fixture
async def plugins(kubelet_dir: Path, tmp_path: Path) -> AsyncIterator[PluginProcesses]:
    processes = PluginProcesses(kubelet_dir, tmp_path / "spec.json")
    yield processes
    for proc in processes.procs:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.parametrize(
    "sig", [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")]
)
async def test_stop_signal_removes_sockets_and_exits_zero(
    kubelet: Kubelet, plugins: PluginProcesses, sig: signal.Signals
) -> None:
    proc = await plugins.spawn({WIDGET: 2})
    await kubelet.wait_for_resource(WIDGET, allocatable=2, timeout=15)
    socket = kubelet.plugin_dir / kubelet.registrations[0].endpoint
    # An extra open ListAndWatch stream must not hold up shutdown.
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stream = pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty())
        await stream.read()
        proc.send_signal(sig)
        code = await asyncio.wait_for(proc.wait(), timeout=5)
    assert code == 0
    assert not socket.exists()
    await kubelet.wait_for(lambda k: not k.resources[WIDGET].connected)


async def test_sighup_reloads_configuration(kubelet: Kubelet, plugins: PluginProcesses) -> None:
    proc = await plugins.spawn({WIDGET: 1})
    await kubelet.wait_for_resource(WIDGET, allocatable=1, timeout=15)
    spec = plugins.spec
    spec.write_text(json.dumps({WIDGET: 3}))
    proc.send_signal(signal.SIGHUP)
    await kubelet.wait_for_resource(WIDGET, allocatable=3)

    spec.write_text("{broken")
    proc.send_signal(signal.SIGHUP)
    assert proc.stderr is not None
    while b"reload failed" not in (line := await asyncio.wait_for(proc.stderr.readline(), 5)):
        assert line, "plugin exited"
    assert proc.returncode is None
    assert kubelet.resources[WIDGET].allocatable == 3
