"""The plugin process killed and stopped: `accel-plugins` itself, against the kubelet emulator.

- SIGKILL leaves a stale socket behind; the next process removes it, registers
  again and offers the same device IDs, so allocations stay valid.
- SIGTERM removes every socket and exits 0 within 2 s, also while ListAndWatch
  streams are open (they end cleanly, status OK).
- A simulated node scripted with a 1,000-XID storm and a lost GPU: the process
  lives through it and the devices recover as health.py documents.
"""

from __future__ import annotations

import asyncio
import signal
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.backends.nvidia.simulate.simulated_profile import load_profile_file
from accel_plugins.kubelet_emulator import Kubelet, PluginClient
from tests.reliability.plugin_process import (
    START_TIMEOUT,
    Node,
    PluginProcesses,
    generic_node,
    nvidia_node,
    our_sockets,
    ready,
)

NODES = [
    pytest.param(lambda root: nvidia_node(), id="nvidia-simulated"),
    pytest.param(generic_node, id="generic-fake-dev"),
]
MakeNode = Callable[[Path], Node]


@pytest.fixture
async def plugins(kubelet_dir: Path, tmp_path: Path) -> AsyncIterator[PluginProcesses]:
    processes = PluginProcesses(kubelet_dir, tmp_path)
    yield processes
    await processes.stop_all()


@pytest.mark.parametrize("make_node", NODES)
async def test_sigkill_then_restart_cleans_up_and_keeps_device_ids(
    kubelet: Kubelet, plugins: PluginProcesses, tmp_path: Path, make_node: MakeNode
) -> None:
    node = make_node(tmp_path)
    first = await plugins.spawn(node)
    await kubelet.wait_for(ready(node), START_TIMEOUT)
    ids = sorted(kubelet.resources[node.resource].devices)
    held = await kubelet.allocate("pod", "main", node.resource, 1)
    (socket,) = our_sockets(kubelet.plugin_dir)

    first.send_signal(signal.SIGKILL)
    assert await first.wait() == -signal.SIGKILL
    # A killed process cannot clean up: its socket file stays, and nobody answers there.
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_unix_connection(socket)
    await kubelet.wait_for(lambda k: not k.resources[node.resource].connected)

    registrations = len(kubelet.registrations)
    await plugins.spawn(node)
    await kubelet.wait_for(ready(node, registrations), START_TIMEOUT)
    assert sorted(kubelet.resources[node.resource].devices) == ids
    assert our_sockets(kubelet.plugin_dir) == [socket]  # replaced, and answering again
    assert stat.S_IMODE(socket.stat().st_mode) == 0o600
    # The allocation made before the kill still names real devices, answered the same way.
    assert kubelet.allocations == [held]
    async with PluginClient(socket) as client:
        assert await client.allocate([list(held.device_ids)]) == [held.response]
    assert "Traceback" not in plugins.output(first) + plugins.output(plugins.procs[-1])


@pytest.mark.parametrize("make_node", NODES)
async def test_sigterm_with_open_streams_removes_sockets_and_exits_0_within_2s(
    kubelet: Kubelet, plugins: PluginProcesses, tmp_path: Path, make_node: MakeNode
) -> None:
    node = make_node(tmp_path)
    proc = await plugins.spawn(node)
    await kubelet.wait_for(ready(node), START_TIMEOUT)
    (socket,) = our_sockets(kubelet.plugin_dir)

    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = pb_grpc.DevicePluginStub(channel)
        # Three watchers besides the kubelet's own stream, each past its first list.
        calls = [stub.ListAndWatch(pb.Empty()) for _ in range(3)]
        streams = [aiter(call) for call in calls]
        for stream in streams:
            first = await asyncio.wait_for(anext(stream), 5)
            assert len(first.devices) == node.devices

        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=2.0) == 0
        for call, stream in zip(calls, streams, strict=True):
            async with asyncio.timeout(5):
                assert [update async for update in stream] == []  # ended, no error
                assert await call.code() == grpc.StatusCode.OK

    assert our_sockets(kubelet.plugin_dir) == []
    await kubelet.wait_for(lambda k: not k.resources[node.resource].connected)
    assert "Traceback" not in plugins.output(proc)


STORM_PROFILE = """
gpus:
  - {name: G, memoryMiB: 1024, numaNode: 0}
  - {name: G, memoryMiB: 1024, numaNode: 0}
  - {name: G, memoryMiB: 1024, numaNode: 1}
events:
EVENTS
  - {at: 0, gpu: 1, lost: true}
  - {at: 0.5, gpu: 1, restore: true}
"""


async def test_a_scripted_fault_storm_leaves_the_process_alive(
    kubelet: Kubelet, plugins: PluginProcesses, tmp_path: Path
) -> None:
    # 1,000 XIDs on GPU 0 (half of them ignored application errors), GPU 1 lost for a while.
    storm = "".join(f"  - {{at: 0, gpu: 0, xid: {13 if i % 2 else 79}}}\n" for i in range(1000))
    profile = tmp_path / "storm.yaml"
    profile.write_text(STORM_PROFILE.replace("EVENTS\n", storm))
    gpus = [gpu.uuid for gpu in load_profile_file(profile).gpus]
    node = nvidia_node(str(profile), devices=3)
    proc = await plugins.spawn(node, "--health-recovery-seconds", "0.5")
    resource = node.resource

    await kubelet.wait_for(
        lambda k: resource in k.resources and k.resources[resource].unhealthy == sorted(gpus[:2]),
        START_TIMEOUT,
        what="GPU 0 (XIDs) and GPU 1 (lost) unhealthy",
    )
    assert proc.returncode is None
    assert kubelet.resources[resource].healthy == [gpus[2]]
    # Quiet for 0.5 s and answering its probe again: both come back.
    await kubelet.wait_for(lambda k: k.resources[resource].allocatable == 3, timeout=10)
    assert proc.returncode is None

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), timeout=2.0) == 0
    assert "Traceback" not in plugins.output(proc)
