"""One resource's DevicePlugin service over a real unix socket."""

from __future__ import annotations

import asyncio
import logging
import stat
import threading
from collections.abc import Sequence

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.deviceplugin.servicer import KUBELET_MAX_MESSAGE_BYTES
from accel_plugins.plugin.device import Device, DeviceNode, Health
from accel_plugins.runtime.capabilities import Capabilities
from tests.fixtures.framework import HookedBackend, ServePlugin


def devices(n: int, *, numa: bool = True) -> dict[str, Device]:
    return {
        f"w{i}": Device(
            f"w{i}",
            numa_nodes=(i % 2,) if numa else (),
            nodes=(DeviceNode(f"/dev/w{i}"),),
            envs={"WIDGET": f"w{i}"},
        )
        for i in range(n)
    }


def ids(response: object) -> dict[str, str]:
    assert isinstance(response, pb.ListAndWatchResponse), response
    return {d.ID: d.health for d in response.devices}


async def test_socket_is_private(serve_plugin: ServePlugin) -> None:
    served = await serve_plugin(devices(1))
    mode = served.server.socket_path.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


@pytest.mark.parametrize(
    ("capabilities", "pre_start", "preferred"),
    [
        pytest.param(Capabilities(), False, False, id="default, one NUMA node"),
        pytest.param(Capabilities.of(HookedBackend()), True, True, id="all-hooks"),
    ],
)
async def test_options_follow_capabilities(
    serve_plugin: ServePlugin, capabilities: Capabilities, pre_start: bool, preferred: bool
) -> None:
    served = await serve_plugin(devices(1), capabilities)
    options = await served.stub.GetDevicePluginOptions(pb.Empty())
    assert options.pre_start_required is pre_start
    assert options.get_preferred_allocation_available is preferred


async def test_list_and_watch_sends_full_list_to_every_stream(serve_plugin: ServePlugin) -> None:
    served = await serve_plugin(devices(2))
    first = served.stub.ListAndWatch(pb.Empty())
    second = served.stub.ListAndWatch(pb.Empty())
    assert ids(await first.read()) == {"w0": "Healthy", "w1": "Healthy"}
    assert ids(await second.read()) == {"w0": "Healthy", "w1": "Healthy"}

    changed = dict(served.servicer.devices)
    changed["w1"] = changed["w1"].with_health(Health.UNHEALTHY)
    changed["w2"] = Device("w2")
    served.servicer.update(changed)
    expected = {"w0": "Healthy", "w1": "Unhealthy", "w2": "Healthy"}
    assert ids(await first.read()) == expected
    assert ids(await second.read()) == expected

    # A reconnecting kubelet gets the current list at once.
    third = served.stub.ListAndWatch(pb.Empty())
    assert ids(await third.read()) == expected


async def test_list_and_watch_reports_numa_topology(serve_plugin: ServePlugin) -> None:
    served = await serve_plugin(devices(2) | devices(1, numa=False))
    stream = served.stub.ListAndWatch(pb.Empty())
    message = await stream.read()
    assert isinstance(message, pb.ListAndWatchResponse)
    topology = {d.ID: [n.ID for n in d.topology.nodes] for d in message.devices}
    # w0 was replaced by a device without NUMA affinity: no topology at all.
    assert topology == {"w0": [], "w1": [1]}


async def test_streams_end_cleanly_on_shutdown(serve_plugin: ServePlugin) -> None:
    served = await serve_plugin(devices(1))
    stream = served.stub.ListAndWatch(pb.Empty())
    await stream.read()
    served.servicer.close()
    assert await stream.read() is grpc.aio.EOF  # type: ignore[attr-defined]
    assert await stream.code() is grpc.StatusCode.OK


async def test_allocate_merges_device_specs(serve_plugin: ServePlugin) -> None:
    served = await serve_plugin(devices(3))
    response = await served.stub.Allocate(
        pb.AllocateRequest(
            container_requests=[
                pb.ContainerAllocateRequest(devicesIDs=["w0", "w2"]),
                pb.ContainerAllocateRequest(devicesIDs=["w1"]),
            ]
        )
    )
    first, second = response.container_responses
    assert [(d.host_path, d.container_path, d.permissions) for d in first.devices] == [
        ("/dev/w0", "/dev/w0", "rw"),
        ("/dev/w2", "/dev/w2", "rw"),
    ]
    assert dict(first.envs) == {"WIDGET": "w2"}
    assert [d.host_path for d in second.devices] == ["/dev/w1"]


async def test_allocate_uses_backend_hook(serve_plugin: ServePlugin) -> None:
    served = await serve_plugin(devices(2), Capabilities.of(HookedBackend()))
    response = await served.stub.Allocate(
        pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devicesIDs=["w1"])])
    )
    assert dict(response.container_responses[0].envs) == {"HOOKED": "w1"}


def allocate(*id_lists: list[str]) -> pb.AllocateRequest:
    return pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devicesIDs=i) for i in id_lists]
    )


def preferred(available: list[str], must: list[str], size: int) -> pb.PreferredAllocationRequest:
    return pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
            )
        ]
    )


@pytest.mark.parametrize(
    ("method", "request_message", "code", "message"),
    [
        pytest.param(
            "Allocate",
            allocate(["nope"]),
            "INVALID_ARGUMENT",
            "unknown device IDs 'nope'",
            id="allocate-unknown",
        ),
        pytest.param(
            "Allocate",
            allocate(["w3"]),
            "INVALID_ARGUMENT",
            "unhealthy device IDs 'w3'",
            id="allocate-unhealthy",
        ),
        pytest.param(
            "Allocate",
            allocate(["w0", "w0"]),
            "INVALID_ARGUMENT",
            "duplicate device IDs 'w0'",
            id="allocate-duplicate",
        ),
        pytest.param(
            "Allocate",
            allocate([]),
            "INVALID_ARGUMENT",
            "names no devices",
            id="allocate-empty-container",
        ),
        pytest.param(
            "Allocate",
            pb.AllocateRequest(),
            "INVALID_ARGUMENT",
            "no container requests",
            id="allocate-no-containers",
        ),
        pytest.param(
            "GetPreferredAllocation",
            preferred(["w0"], [], 2),
            "INVALID_ARGUMENT",
            "larger than the 1 available",
            id="preferred-too-large",
        ),
        pytest.param(
            "GetPreferredAllocation",
            preferred(["w0", "w1"], ["w2"], 2),
            "INVALID_ARGUMENT",
            "'w2' are not available",
            id="preferred-must-missing",
        ),
        pytest.param(
            "GetPreferredAllocation",
            preferred(["w0"], ["ghost"], 1),
            "INVALID_ARGUMENT",
            "unknown device IDs 'ghost'",
            id="preferred-must-unknown",
        ),
        pytest.param(
            "GetPreferredAllocation",
            preferred(["w0"], [], 0),
            "INVALID_ARGUMENT",
            "must be positive",
            id="preferred-zero",
        ),
    ],
)
async def test_bad_requests_get_status_codes(
    serve_plugin: ServePlugin,
    method: str,
    request_message: object,
    code: str,
    message: str,
) -> None:
    all_devices = devices(3)
    all_devices["w3"] = Device("w3", Health.UNHEALTHY)
    served = await serve_plugin(all_devices)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(served.stub, method)(request_message)
    assert caught.value.code().name == code
    assert message in (caught.value.details() or "")
    assert "example.com/widget" in (caught.value.details() or "")
    # ...and the server keeps serving.
    assert (await served.stub.GetDevicePluginOptions(pb.Empty())).pre_start_required is False


async def test_preferred_allocation_default_policy(serve_plugin: ServePlugin) -> None:
    served = await serve_plugin(devices(6))
    answer = await served.stub.GetPreferredAllocation(
        preferred(["w0", "w1", "w2", "w3", "w5", "ghost-skipped"], ["w3"], 2)
    )
    # w3 is on NUMA node 1; so are w1 and w5: the lowest of them joins it.
    assert list(answer.container_responses[0].deviceIDs) == ["w1", "w3"]


async def test_preferred_allocation_backend_policy(serve_plugin: ServePlugin) -> None:
    served = await serve_plugin(devices(4), Capabilities.of(HookedBackend()))
    answer = await served.stub.GetPreferredAllocation(preferred(["w0", "w1", "w2", "w3"], [], 2))
    assert list(answer.container_responses[0].deviceIDs) == ["w3", "w2"]


class SlowPolicy(HookedBackend):
    """A preferred-allocation policy that holds its thread until released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def preferred_allocation(
        self,
        resource: str,
        available: Sequence[Device],
        must_include: Sequence[Device],
        size: int,
    ) -> Sequence[str]:
        self.entered.set()
        self.release.wait(timeout=30)
        return super().preferred_allocation(resource, available, must_include, size)


async def test_slow_preferred_policy_does_not_stall_other_rpcs(serve_plugin: ServePlugin) -> None:
    backend = SlowPolicy()
    served = await serve_plugin(devices(2), Capabilities.of(backend))
    stream = served.stub.ListAndWatch(pb.Empty())
    assert ids(await stream.read()) == {"w0": "Healthy", "w1": "Healthy"}
    pending = asyncio.ensure_future(
        served.stub.GetPreferredAllocation(preferred(["w0", "w1"], [], 1))
    )
    assert await asyncio.to_thread(backend.entered.wait, 10)
    # While the policy thinks: a health change streams out and Allocate answers.
    served.servicer.update(devices(2) | {"w0": devices(1)["w0"].with_health(Health.UNHEALTHY)})
    assert ids(await asyncio.wait_for(stream.read(), 5)) == {"w0": "Unhealthy", "w1": "Healthy"}
    await asyncio.wait_for(served.stub.Allocate(allocate(["w1"])), 5)
    backend.release.set()
    answer = await asyncio.wait_for(pending, 5)
    assert list(answer.container_responses[0].deviceIDs) == ["w1"]
    stream.cancel()


async def test_pre_start_calls_backend_hook(serve_plugin: ServePlugin) -> None:
    backend = HookedBackend()
    served = await serve_plugin(devices(2), Capabilities.of(backend))
    await served.stub.PreStartContainer(pb.PreStartContainerRequest(devicesIDs=["w0", "w1"]))
    assert backend.pre_started == [["w0", "w1"]]

    backend.pre_start_error = RuntimeError("reset failed")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.stub.PreStartContainer(pb.PreStartContainerRequest(devicesIDs=["w0"]))
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    assert "reset failed" in (caught.value.details() or "")


async def test_oversized_list_is_refused_not_sent(
    serve_plugin: ServePlugin, caplog: pytest.LogCaptureFixture
) -> None:
    served = await serve_plugin(devices(1))
    stream = served.stub.ListAndWatch(pb.Empty())
    assert ids(await stream.read()) == {"w0": "Healthy"}
    long_id = "x" * 1000
    huge = {f"{long_id}{i}": Device(f"{long_id}{i}") for i in range(5000)}
    with caplog.at_level(logging.ERROR):
        assert served.servicer.update(huge) is False
    assert "example.com/widget" in caplog.text
    assert "5000 devices" in caplog.text
    assert str(KUBELET_MAX_MESSAGE_BYTES) in caplog.text
    # The stream still works and carries the next acceptable list.
    served.servicer.update(devices(2))
    assert ids(await asyncio.wait_for(stream.read(), 5)) == {"w0": "Healthy", "w1": "Healthy"}
