"""/metrics and /healthz over real HTTP, following the framework against the kubelet emulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.deviceplugin.servicer import DevicePluginServicer
from accel_plugins.errors import AllocationError, ConfigError
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.metrics import parse_address
from accel_plugins.plugin.device import ContainerAllocation, Device, Health, tree
from tests.fixtures.framework import ScriptedBackend
from tests.support.metrics import MetricsNode, series

WIDGET = "example.com/widget"
RES = ("resource", WIDGET)


class RefusingBackend(ScriptedBackend):
    """Allocates through a hook: refuses ``w1`` (AllocationError) and crashes on ``w2``."""

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation:
        ids = {d.id for d in devices}
        if "w1" in ids:
            raise AllocationError(f"resource {resource}: w1 is reserved")
        if "w2" in ids:
            raise RuntimeError("backend bug")
        return ContainerAllocation(envs={"W": ",".join(sorted(ids))})


@pytest.fixture
async def node(kubelet: Kubelet) -> AsyncIterator[tuple[MetricsNode, RefusingBackend]]:
    devices = [Device("w0"), Device("w1"), Device("w2"), Device("w3", Health.UNHEALTHY)]
    backend = RefusingBackend(tree({WIDGET: devices}))
    async with MetricsNode(lambda: backend, kubelet.plugin_dir) as running:
        await kubelet.wait_for_resource(WIDGET, allocatable=3)
        await kubelet.wait_for(lambda k: running.manager.status()[WIDGET].registered)
        yield running, backend


async def test_scrape_reports_devices_registration_and_streams(
    kubelet: Kubelet, node: tuple[MetricsNode, RefusingBackend]
) -> None:
    running, backend = node
    values = await running.scrape()
    assert series(values, "accel_plugins_devices") == {
        (("health", "Healthy"), RES): 3,
        (("health", "Unhealthy"), RES): 1,
    }
    assert series(values, "accel_plugins_resource_registered") == {(RES,): 1}
    assert series(values, "accel_plugins_registrations_total") == {(RES,): 1}
    assert series(values, "accel_plugins_list_and_watch_streams") == {(RES,): 1}
    assert series(values, "accel_plugins_kubelet_restarts_total") == {(): 0}
    (info,) = series(values, "accel_plugins_build_info")
    assert dict(info)["version"]
    assert dict(info)["node_name"] == ""  # no --node-name given

    backend.set(tree({WIDGET: [Device("w0")]}))
    await kubelet.wait_for_resource(WIDGET, allocatable=1)
    values = await running.scrape()
    assert series(values, "accel_plugins_devices")[(("health", "Unhealthy"), RES)] == 0
    assert set(series(values, "accel_plugins_device_healthy")) == {
        (("container", ""), ("device", "w0"), ("namespace", ""), ("pod", ""), RES)
    }


async def test_allocations_move_the_counters_and_the_rpc_histogram(
    kubelet: Kubelet, node: tuple[MetricsNode, RefusingBackend]
) -> None:
    running, _ = node
    before = await running.scrape()
    assert series(before, "accel_plugins_allocations_total") == {(RES,): 0}

    await kubelet.allocate("pod-a", "main", WIDGET, 1)  # the emulator's own pick: w0
    values = await running.scrape()
    assert series(values, "accel_plugins_allocations_total") == {(RES,): 1}
    assert series(values, "accel_plugins_allocated_devices_total") == {(RES,): 1}
    counts = series(values, "accel_plugins_rpc_duration_seconds_count")
    assert counts[(("method", "Allocate"), RES)] == 1
    # One NUMA node, no backend policy: nothing to prefer, so the kubelet did not ask.
    assert (("method", "GetPreferredAllocation"), RES) not in counts
    assert counts[(("method", "GetDevicePluginOptions"), RES)] >= 1  # asked at registration
    buckets = series(values, "accel_plugins_rpc_duration_seconds_bucket")
    assert buckets[(("le", "+Inf"), ("method", "Allocate"), RES)] == 1


@pytest.mark.parametrize(
    ("ids", "reason", "code"),
    [
        pytest.param([], "empty_request", grpc.StatusCode.INVALID_ARGUMENT, id="no-containers"),
        pytest.param([[]], "empty_request", grpc.StatusCode.INVALID_ARGUMENT, id="no-ids"),
        pytest.param([["nope"]], "unknown_device", grpc.StatusCode.INVALID_ARGUMENT, id="unknown"),
        pytest.param(
            [["w3"]], "unhealthy_device", grpc.StatusCode.INVALID_ARGUMENT, id="unhealthy"
        ),
        pytest.param(
            [["w0", "w0"]], "duplicate_device", grpc.StatusCode.INVALID_ARGUMENT, id="duplicate"
        ),
        pytest.param([["w1"]], "backend_refused", grpc.StatusCode.INVALID_ARGUMENT, id="refused"),
        pytest.param([["w2"]], "backend_error", grpc.StatusCode.INTERNAL, id="backend-crash"),
    ],
)
async def test_allocation_errors_count_by_reason(
    kubelet: Kubelet,
    node: tuple[MetricsNode, RefusingBackend],
    ids: list[list[str]],
    reason: str,
    code: grpc.StatusCode,
) -> None:
    running, _ = node
    socket = kubelet.plugin_dir / kubelet.registrations[0].endpoint
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devicesIDs=c) for c in ids]
    )
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await pb_grpc.DevicePluginStub(channel).Allocate(request, timeout=5)
    assert failed.value.code() == code
    values = await running.scrape()
    errors = series(values, "accel_plugins_allocation_errors_total")
    assert errors[(("reason", reason), RES)] == 1
    assert sum(errors.values()) == 1  # every other reason is a zero series
    assert series(values, "accel_plugins_allocations_total") == {(RES,): 0}
    assert (
        series(values, "accel_plugins_rpc_duration_seconds_count")[(("method", "Allocate"), RES)]
        == 1
    )


async def test_kubelet_restart_counts_and_healthz_follows(
    kubelet: Kubelet, node: tuple[MetricsNode, RefusingBackend]
) -> None:
    running, _ = node
    assert await running.get("/healthz") == (200, "ok\n")
    assert await running.get("/readyz") == (200, "ready\n")

    await kubelet.stop()  # the kubelet goes away, and its socket with it
    assert not kubelet.socket_path.exists()
    assert await running.get("/healthz") == (
        503,
        f"{WIDGET}: not registered with the kubelet\n",
    )
    # Nothing to wait for besides: not ready for what makes it unhealthy.
    assert await running.get("/readyz") == (503, f"{WIDGET}: not registered with the kubelet\n")

    await kubelet.start()  # a new kubelet wipes the directory: re-serve, re-register
    await kubelet.wait_for_resource(WIDGET)
    await kubelet.wait_for(lambda k: running.manager.status()[WIDGET].registered)
    assert await running.get("/healthz") == (200, "ok\n")
    values = await running.scrape()
    assert series(values, "accel_plugins_kubelet_restarts_total") == {(): 1}
    assert series(values, "accel_plugins_registrations_total") == {(RES,): 2}
    restarts = series(values, "accel_plugins_server_restarts_total")
    assert restarts == {(("reason", "socket_removed"), RES): 1}


async def test_healthz_fails_while_a_server_does_not_answer(
    kubelet: Kubelet, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung = asyncio.Event()

    async def options(
        self: DevicePluginServicer, request: pb.Empty, context: object
    ) -> pb.DevicePluginOptions:
        if hung.is_set():
            await asyncio.Event().wait()  # never answers; cancelled when the server stops
        return self.options()

    # Before the server starts: gRPC binds the handler methods once, at start.
    monkeypatch.setattr(DevicePluginServicer, "GetDevicePluginOptions", options)
    backend = ScriptedBackend(tree({WIDGET: [Device("w0")]}))
    async with MetricsNode(lambda: backend, kubelet.plugin_dir, probe_timeout=0.3) as running:
        await kubelet.wait_for_resource(WIDGET, allocatable=1)
        await kubelet.wait_for(lambda k: running.manager.status()[WIDGET].registered)
        assert await running.get("/healthz") == (200, "ok\n")
        hung.set()
        socket = kubelet.plugin_dir / kubelet.registrations[-1].endpoint
        assert await running.get("/healthz") == (
            503,
            f"{WIDGET}: does not answer on {socket}: DEADLINE_EXCEEDED\n",
        )


async def test_unknown_paths_and_methods(node: tuple[MetricsNode, RefusingBackend]) -> None:
    running, _ = node
    assert (await running.get("/nothing"))[0] == 404


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", None, id="empty-disables"),
        pytest.param(":9478", ("0.0.0.0", 9478), id="all-interfaces"),
        pytest.param("127.0.0.1:80", ("127.0.0.1", 80), id="host-port"),
        pytest.param("[::1]:9000", ("::1", 9000), id="ipv6"),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("9478", id="no-colon"),
        pytest.param(":0x", id="bad-port"),
        pytest.param(":70000", id="port-range"),
    ],
)
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="--metrics-address"):
        parse_address(text)
