"""Fixtures for the kubelet emulator and inspect tests.

``StubPlugin`` is a test double of a *device plugin* (any vendor's): a small
grpc.aio DevicePlugin servicer on a real unix socket that records every call
and whose devices and failures the test sets by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.kubelet_emulator import DeviceState, Kubelet, PluginOptions
from accel_plugins.kubelet_emulator.client import unix_target

RESOURCE = "example.com/widget"
NO_OPTIONS = PluginOptions()

PreferredPolicy = Callable[[list[str], list[str], int], list[str]]


def widgets(
    count: int, *, unhealthy: Sequence[str] = (), numa: int | None = 0
) -> list[DeviceState]:
    """``w0 .. w<count-1>``, on NUMA node ``numa`` (None: no topology)."""
    return [
        DeviceState(
            id=f"w{i}",
            health="Unhealthy" if f"w{i}" in unhealthy else "Healthy",
            numa_nodes=() if numa is None else (numa,),
        )
        for i in range(count)
    ]


def stub_response(ids: Sequence[str]) -> pb.ContainerAllocateResponse:
    """What the stub answers to Allocate: one of everything the API can carry."""
    return pb.ContainerAllocateResponse(
        envs={"WIDGETS": ",".join(ids)},
        mounts=[
            pb.Mount(container_path="/opt/widget", host_path="/usr/lib/widget", read_only=True)
        ],
        devices=[
            pb.DeviceSpec(container_path=f"/dev/{i}", host_path=f"/dev/{i}", permissions="rw")
            for i in ids
        ],
        annotations={"example.com/widgets": ",".join(ids)},
        cdi_devices=[pb.CDIDevice(name=f"example.com/widget={i}") for i in ids],
    )


class StubPlugin(pb_grpc.DevicePluginServicer):
    """A device plugin double serving on ``socket_path``."""

    def __init__(
        self,
        socket_path: Path,
        devices: Sequence[DeviceState],
        *,
        options: PluginOptions = NO_OPTIONS,
        preferred: PreferredPolicy | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.devices = list(devices)
        self.options = options
        self.preferred = preferred or (lambda available, must, size: sorted(available)[-size:])
        self.calls: list[str] = []
        self.preferred_requests: list[tuple[list[str], list[str], int]] = []
        self.allocate_requests: list[list[list[str]]] = []
        self.pre_start_requests: list[list[str]] = []
        # method name -> (code, details) to fail with instead of answering
        self.errors: dict[str, tuple[grpc.StatusCode, str]] = {}
        self.streams = 0
        # ListAndWatch waits for this before its first message; clear it to hold streams back.
        self.list_gate = asyncio.Event()
        self.list_gate.set()
        self.stream_opened = asyncio.Event()
        self._queues: set[asyncio.Queue[list[DeviceState] | None]] = set()
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self._server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(self, self._server)
        self._server.add_insecure_port(unix_target(self.socket_path))
        await self._server.start()

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(None)

    async def restart(self) -> None:
        """Serve again on a fresh socket, as a plugin does after the kubelet wiped its directory."""
        await self.stop()
        await self.start()

    async def register(
        self,
        kubelet_socket: Path,
        resource: str = RESOURCE,
        *,
        version: str = "v1beta1",
        endpoint: str | None = None,
    ) -> None:
        """Call the kubelet's Register as a plugin would; gRPC errors propagate."""
        async with grpc.aio.insecure_channel(unix_target(kubelet_socket)) as channel:
            await pb_grpc.RegistrationStub(channel).Register(
                pb.RegisterRequest(
                    version=version,
                    endpoint=self.socket_path.name if endpoint is None else endpoint,
                    resource_name=resource,
                    options=self.options.to_proto(),
                ),
                timeout=10,
            )

    def set_devices(self, devices: Sequence[DeviceState]) -> None:
        """Send a new complete list on every open ListAndWatch stream."""
        self.devices = list(devices)
        for queue in self._queues:
            queue.put_nowait(self.devices)

    def end_streams(self) -> None:
        """Finish every ListAndWatch stream cleanly (the plugin lets go)."""
        for queue in self._queues:
            queue.put_nowait(None)

    async def _fail_if_asked(
        self, method: str, context: grpc.aio.ServicerContext[object, object]
    ) -> None:
        self.calls.append(method)
        if method in self.errors:
            code, details = self.errors[method]
            await context.abort(code, details)

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.DevicePluginOptions:
        await self._fail_if_asked("GetDevicePluginOptions", context)
        return self.options.to_proto()

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[object, object]
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        await self._fail_if_asked("ListAndWatch", context)
        queue: asyncio.Queue[list[DeviceState] | None] = asyncio.Queue()
        self._queues.add(queue)
        self.streams += 1
        self.stream_opened.set()
        try:
            await self.list_gate.wait()
            devices: list[DeviceState] | None = self.devices
            while devices is not None:
                yield pb.ListAndWatchResponse(devices=[d.to_proto() for d in devices])
                devices = await queue.get()
        finally:
            self._queues.discard(queue)

    async def GetPreferredAllocation(
        self,
        request: pb.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.PreferredAllocationResponse:
        await self._fail_if_asked("GetPreferredAllocation", context)
        answers = []
        for req in request.container_requests:
            args = (list(req.available_deviceIDs), list(req.must_include_deviceIDs))
            self.preferred_requests.append((*args, req.allocation_size))
            ids = self.preferred(*args, req.allocation_size)
            answers.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=answers)

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.AllocateResponse:
        await self._fail_if_asked("Allocate", context)
        containers = [list(r.devicesIDs) for r in request.container_requests]
        self.allocate_requests.append(containers)
        return pb.AllocateResponse(container_responses=[stub_response(ids) for ids in containers])

    async def PreStartContainer(
        self,
        request: pb.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.PreStartContainerResponse:
        await self._fail_if_asked("PreStartContainer", context)
        self.pre_start_requests.append(list(request.devicesIDs))
        return pb.PreStartContainerResponse()


MakePlugin = Callable[..., Awaitable[StubPlugin]]


# The repo's names for the accel_plugins.testing plugin's fixtures (the plugin vendors use).


@pytest.fixture
def kubelet_dir(accel_plugin_dir: Path) -> Path:
    """A device plugin directory directly under /tmp: unix socket paths must stay < 108 bytes."""
    return accel_plugin_dir


@pytest.fixture
def kubelet_events(accel_kubelet_events: list[str]) -> list[str]:
    """Every line the ``kubelet`` fixture reported through on_event."""
    return accel_kubelet_events


@pytest.fixture
def kubelet(accel_kubelet: Kubelet) -> Kubelet:
    """A started emulator on ``kubelet_dir``, serving PodResources under ``pod-resources/``."""
    return accel_kubelet


@pytest.fixture
async def make_plugin(kubelet_dir: Path) -> AsyncIterator[MakePlugin]:
    """Factory: a started ``StubPlugin`` at ``kubelet_dir/<name>.sock``; stopped at teardown."""
    plugins: list[StubPlugin] = []

    async def make(
        devices: Sequence[DeviceState] = (),
        *,
        name: str = "widget",
        options: PluginOptions = NO_OPTIONS,
        preferred: PreferredPolicy | None = None,
    ) -> StubPlugin:
        plugin = StubPlugin(
            kubelet_dir / f"{name}.sock", devices, options=options, preferred=preferred
        )
        await plugin.start()
        plugins.append(plugin)
        return plugin

    yield make
    for plugin in plugins:
        await plugin.stop()


async def register(kubelet: Kubelet, plugin: StubPlugin, resource: str = RESOURCE) -> None:
    """Register ``plugin`` and wait until its first device list arrived."""
    updates = kubelet.resources[resource].updates if resource in kubelet.resources else 0
    await plugin.register(kubelet.socket_path, resource)
    await kubelet.wait_for_resource(resource, min_updates=updates + 1)
