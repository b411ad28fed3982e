"""The `accel-plugins` command as an operator runs it."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import grpc

from accel_plugins import __version__
from accel_plugins.api import podresources_v1_pb2 as pr
from accel_plugins.api import podresources_v1_pb2_grpc as pr_grpc
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.device import Device, DeviceNode, tree
from tests.fixtures.framework import ScriptedBackend, StartManager
from tests.support.cli import run_cli

WIDGET = "example.com/widget"


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"accel-plugins {__version__}"


def test_help_lists_subcommands() -> None:
    result = run_cli("--help")
    for command in ("generic", "nvidia", "demo", "inspect", "kubelet"):
        assert command in result.stdout


async def test_inspect_our_plugin(kubelet: Kubelet, start_manager: StartManager) -> None:
    devices = [
        Device(f"w{i}", numa_nodes=(i // 2,), nodes=(DeviceNode(f"/dev/w{i}"),)) for i in range(4)
    ]
    await start_manager(ScriptedBackend(tree({WIDGET: devices})))
    await kubelet.wait_for_resource(WIDGET, allocatable=4)
    socket = kubelet.plugin_dir / kubelet.registrations[0].endpoint

    result = await asyncio.to_thread(run_cli, "inspect", str(socket), "--allocate", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    text = json.dumps(report)
    for device_id in ("w0", "w1", "w2", "w3"):
        assert device_id in text
    assert "/dev/w0" in text  # the dry-run Allocate of two devices on NUMA node 0
    assert "/dev/w1" in text

    plain = await asyncio.to_thread(run_cli, "inspect", str(socket))
    assert plain.returncode == 0, plain.stderr
    assert "w3" in plain.stdout


def test_inspect_missing_socket_fails_clearly(tmp_path: Path) -> None:
    result = run_cli("inspect", str(tmp_path / "nope.sock"))
    assert result.returncode == 1
    assert "nope.sock" in result.stderr
    assert "Traceback" not in result.stderr


async def test_pod_resources_report_our_allocations(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    devices = [Device(f"w{i}", numa_nodes=(1,)) for i in range(3)]
    await start_manager(ScriptedBackend(tree({WIDGET: devices})))
    await kubelet.wait_for_resource(WIDGET, allocatable=3)
    record = await kubelet.allocate("web", "app", WIDGET, 2, namespace="shop")
    assert kubelet.pod_resources_socket is not None
    async with grpc.aio.insecure_channel(f"unix://{kubelet.pod_resources_socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        listed = await stub.List(pr.ListPodResourcesRequest())
    (pod,) = listed.pod_resources
    assert (pod.namespace, pod.name) == ("shop", "web")
    (container,) = pod.containers
    (held,) = container.devices
    assert held.resource_name == WIDGET
    assert sorted(held.device_ids) == sorted(record.device_ids)
    assert [n.ID for n in held.topology.nodes] == [1]


async def test_kubelet_subcommand_serves_registration(tmp_path: Path) -> None:
    plugin_dir = Path("/tmp") / f"cli-kl-{tmp_path.name[-8:]}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "accel_plugins.cli.main",
        "kubelet",
        "--plugin-dir",
        str(plugin_dir),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        while b"listening" not in (line := await asyncio.wait_for(proc.stdout.readline(), 15)):
            assert line, "emulator exited"
        assert (plugin_dir / "kubelet.sock").is_socket()
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 5) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
        shutil.rmtree(plugin_dir, ignore_errors=True)
