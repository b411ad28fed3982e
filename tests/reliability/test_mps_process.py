"""MPS end to end: `accel-plugins mps-control-daemon` and `accel-plugins nvidia` as processes.

Both run on the simulated pcie-4gpu node with one config (every GPU MPS-shared,
2 replicas) and one MPS root; the daemon runs the fake control program. The
kubelet emulator sees the 8 replicas Healthy once the daemon is up, Unhealthy
(still listed) while a killed control program is down, Healthy again after the
daemon restarts it, and Unhealthy once the daemon is stopped (it quits the
control program and exits 0). A daemon killed with SIGKILL, its control program
with it (what a killed container does), leaves its files behind: the replicas turn
Unhealthy within issue 26's 2 s all the same (the life lock died), and Healthy once
a new daemon runs; in DRA mode too, as the DRA health stream shows.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.mps.fake_mps_control import COMMANDS_FILE, PID_FILE
from accel_plugins.backends.nvidia.mps.mps_root import MpsRoot
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.testing import short_tempdir
from tests.e2e.test_dra_cli import KUBECONFIG as UNREACHABLE_KUBECONFIG
from tests.reliability.plugin_process import ROOT, START_TIMEOUT, Node, PluginProcesses, ready

CONFIG = """\
version: v1
sharing:
  mps:
    resources:
    - {name: nvidia.com/gpu, replicas: 2}
"""
RESOURCE = "nvidia.com/gpu"
DRA_DRIVER = "gpu.nvidia.com"


@pytest.fixture
async def plugins(kubelet_dir: Path, tmp_path: Path) -> AsyncIterator[PluginProcesses]:
    processes = PluginProcesses(kubelet_dir, tmp_path)
    yield processes
    await processes.stop_all()


async def start_daemon(common: list[str], log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "accel_plugins.cli.main",
            "mps-control-daemon",
            *common,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


async def spawn_plugin(*argv: str, log: Path) -> asyncio.subprocess.Process:
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "accel_plugins.cli.main",
            *argv,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


def unhealthy(count: int) -> Callable[[Kubelet], bool]:
    def check(k: Kubelet) -> bool:
        view = k.resources.get(RESOURCE)
        return view is not None and view.connected and len(view.unhealthy) == count

    return check


async def test_replicas_follow_the_control_daemon(
    kubelet: Kubelet, plugins: PluginProcesses, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    root = MpsRoot(tmp_path / "mps")
    common = ["--simulate", "pcie-4gpu", "--config", str(config), "--mps-root", str(root.path)]
    node = Node(["nvidia", *common, "--metrics-address", ""], RESOURCE, 8)

    await plugins.spawn(node)
    # Listed before the daemon is up, all Unhealthy.
    await kubelet.wait_for(unhealthy(8), START_TIMEOUT)

    with (tmp_path / "daemon.log").open("wb") as out:
        daemon = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "accel_plugins.cli.main",
            "mps-control-daemon",
            *common,
            cwd=ROOT,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        await kubelet.wait_for(ready(node), START_TIMEOUT)

        pid = int((root.pipe_dir(RESOURCE) / PID_FILE).read_text())
        os.kill(pid, signal.SIGKILL)
        await kubelet.wait_for(unhealthy(8), START_TIMEOUT)
        assert kubelet.resources[RESOURCE].capacity == 8  # marked, not removed
        await kubelet.wait_for(ready(node), START_TIMEOUT)
        assert int((root.pipe_dir(RESOURCE) / PID_FILE).read_text()) != pid

        daemon.send_signal(signal.SIGTERM)
        async with asyncio.timeout(START_TIMEOUT):
            assert await daemon.wait() == 0
        await kubelet.wait_for(unhealthy(8), START_TIMEOUT)
    finally:
        if daemon.returncode is None:
            daemon.kill()
            await daemon.wait()
    log = (tmp_path / "daemon.log").read_text()
    assert "Traceback" not in log, log
    commands = (root.log_dir(RESOURCE) / COMMANDS_FILE).read_text().splitlines()
    assert commands.count("set_default_active_thread_percentage 50") == 2  # two starts
    assert commands[-1] == "quit"
    assert not root.ready_file.exists()


async def test_a_sigkilled_daemon_turns_replicas_unhealthy_within_2s(
    kubelet: Kubelet, plugins: PluginProcesses, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    root = MpsRoot(tmp_path / "mps")
    common = ["--simulate", "pcie-4gpu", "--config", str(config), "--mps-root", str(root.path)]
    node = Node(["nvidia", *common, "--metrics-address", ""], RESOURCE, 8)
    await plugins.spawn(node)
    daemons = [await start_daemon(common, tmp_path / "daemon.log")]
    try:
        await kubelet.wait_for(ready(node), START_TIMEOUT)
        control = int((root.pipe_dir(RESOURCE) / PID_FILE).read_text())

        # The whole container dies at once: the daemon and its control program.
        killed_at = time.monotonic()
        os.kill(daemons[0].pid, signal.SIGKILL)
        os.kill(control, signal.SIGKILL)
        await daemons[0].wait()
        assert root.started_file(RESOURCE).exists()  # left behind
        assert root.ready_file.exists()
        await kubelet.wait_for(unhealthy(8), START_TIMEOUT)
        assert time.monotonic() - killed_at < 2.0  # issue 26's bound
        assert kubelet.resources[RESOURCE].capacity == 8  # marked, not removed

        daemons.append(await start_daemon(common, tmp_path / "daemon.log"))
        await kubelet.wait_for(ready(node), START_TIMEOUT)
        assert int((root.pipe_dir(RESOURCE) / PID_FILE).read_text()) != control
    finally:
        for daemon in daemons:
            if daemon.returncode is None:
                daemon.send_signal(signal.SIGTERM)
                async with asyncio.timeout(START_TIMEOUT):
                    await daemon.wait()
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()


async def test_dra_mode_follows_the_daemon_too(
    watching_kubelet: Kubelet, registry_dir: Path, tmp_path: Path
) -> None:
    """The same replicas in DRA mode: the health stream (DRAResourceHealth) says Unhealthy
    within 2 s of the SIGKILL, Healthy after a restart. The API server is unreachable
    (tests/e2e/test_dra_cli.py): the kubelet side serves regardless."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    root = MpsRoot(tmp_path / "mps")
    common = ["--simulate", "pcie-4gpu", "--config", str(config), "--mps-root", str(root.path)]
    with short_tempdir("mpsdra-") as plugins:
        plugin = await spawn_plugin(
            "nvidia",
            *common,
            "--metrics-address",
            "",
            "--kubelet-api",
            "dra",
            "--node-name",
            "node-1",
            "--kubeconfig",
            str(kubeconfig),
            "--kubelet-plugins-dir",
            str(plugins / "plugins"),
            "--plugins-registry-dir",
            str(registry_dir),
            "--dra-cdi-spec-dir",
            str(plugins / "cdi"),
            log=tmp_path / "plugin.log",
        )
        daemons = [await start_daemon(common, tmp_path / "daemon.log")]
        try:
            await watching_kubelet.wait_for(lambda k: DRA_DRIVER in k.dra.names, START_TIMEOUT)
            health = watching_kubelet.dra.client(DRA_DRIVER).watch_health()

            async def until(state: str) -> None:
                async with asyncio.timeout(START_TIMEOUT):
                    while {d.health for d in await anext(health)} != {state}:
                        pass

            await until("Healthy")
            killed_at = time.monotonic()
            os.kill(daemons[0].pid, signal.SIGKILL)
            os.kill(int((root.pipe_dir(RESOURCE) / PID_FILE).read_text()), signal.SIGKILL)
            await until("Unhealthy")
            assert time.monotonic() - killed_at < 2.0  # issue 26's bound, in DRA mode too
            daemons.append(await start_daemon(common, tmp_path / "daemon.log"))
            await until("Healthy")
            await health.aclose()
        finally:
            for proc in [plugin, *daemons]:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                    async with asyncio.timeout(START_TIMEOUT):
                        await proc.wait()
    assert "Traceback" not in (tmp_path / "plugin.log").read_text()
