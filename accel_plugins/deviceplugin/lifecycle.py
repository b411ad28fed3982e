"""The lifecycle of one resource's plugin: serve, register, re-register, stop.

Kept apart from the servicer (which only answers RPCs) and from the manager
(which decides which resources exist), like squat's lifecycle wrapper. Serving is
:class:`PluginServer` (the DevicePlugin service on the resource's socket), registering
is :func:`register` (the Register call on ``kubelet.sock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import grpc

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.deviceplugin.servicer import DevicePluginServicer
from accel_plugins.errors import RegistrationError
from accel_plugins.plugin.device import Device
from accel_plugins.runtime.backoff import Backoff
from accel_plugins.runtime.capabilities import Capabilities
from accel_plugins.runtime.recorder import NO_METRICS, PluginMetrics, PluginStatus, RestartReason
from accel_plugins.runtime.server import SocketServer

log = logging.getLogger(__name__)


API_VERSION = "v1beta1"


async def register(
    kubelet_socket: Path,
    *,
    endpoint: str,
    resource: str,
    options: pb.DevicePluginOptions,
    timeout: float = 5.0,
) -> None:
    """Call Registration.Register on the kubelet; RegistrationError says why it failed."""
    if not kubelet_socket.exists():
        raise RegistrationError(f"kubelet socket {kubelet_socket} does not exist")
    request = pb.RegisterRequest(
        version=API_VERSION, endpoint=endpoint, resource_name=resource, options=options
    )
    async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
        stub = pb_grpc.RegistrationStub(channel)
        try:
            await stub.Register(request, timeout=timeout, wait_for_ready=False)
        except grpc.aio.AioRpcError as exc:
            raise RegistrationError(
                f"kubelet at {kubelet_socket} refused {resource} "
                f"({exc.code().name}: {exc.details()})"
            ) from exc
        except OSError as exc:
            raise RegistrationError(f"cannot reach the kubelet at {kubelet_socket}: {exc}") from exc


class PluginServer(SocketServer):
    """Serves a DevicePluginServicer on ``socket_path`` until stopped."""

    def __init__(self, servicer: DevicePluginServicer, socket_path: Path) -> None:
        super().__init__(
            socket_path,
            lambda server: pb_grpc.add_DevicePluginServicer_to_server(servicer, server),
            directory_flag="--plugin-dir",
        )
        self.servicer = servicer

    async def start(self) -> None:
        """Remove a stale socket of our name and serve.

        No call to ourselves first: once start() returns, gRPC listens on the
        socket and the kubelet's connection is accepted. A probe RPC cost a client
        channel and a round trip (1 to 15 ms) on the way to registration
        (issue 17); /healthz still asks the socket (``answers``).
        """
        await self._serve()

    async def answers(self, timeout: float) -> str | None:
        """None when the server answers GetDevicePluginOptions within ``timeout``, else why not."""
        if self._server is None:
            return "not started"
        try:
            async with grpc.aio.insecure_channel(f"unix://{self.socket_path}") as channel:
                stub = pb_grpc.DevicePluginStub(channel)
                await stub.GetDevicePluginOptions(pb.Empty(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            return f"does not answer on {self.socket_path}: {exc.code().name}"
        return None

    async def stop(self, grace: float = 0.5) -> None:
        """End streams cleanly, stop serving, and remove our socket (only ours)."""
        self.servicer.close()
        await self._stop_serving(grace)


class ResourcePlugin:
    def __init__(
        self,
        resource: str,
        socket_path: Path,
        kubelet_socket: Path,
        capabilities: Capabilities,
        devices: Mapping[str, Device],
        *,
        kubelet_identity: Callable[[], int | None],
        register_timeout: float,
        backoff: Backoff,
        metrics: PluginMetrics = NO_METRICS,
    ) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self.kubelet_socket = kubelet_socket
        self.capabilities = capabilities
        self.devices: Mapping[str, Device] = devices
        self.registered_with: int | None = None  # identity of the kubelet socket we registered on
        self.registrations = 0
        self._kubelet_identity = kubelet_identity
        self._register_timeout = register_timeout
        self._backoff = backoff
        self._metrics = metrics
        self._server: PluginServer | None = None
        self._register_task: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()

    # -- serving -------------------------------------------------------------

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.socket_alive()

    async def serve(self) -> None:
        servicer = DevicePluginServicer(
            self.resource, self.capabilities, self.devices, metrics=self._metrics
        )
        server = PluginServer(servicer, self.socket_path)
        await server.start()
        self._server = server
        log.info(
            "resource %s: serving %d devices on %s",
            self.resource,
            len(self.devices),
            self.socket_path,
        )

    async def restart(self, reason: RestartReason = RestartReason.SOCKET_REMOVED) -> None:
        """Serve afresh (our socket was removed or options changed) and re-register."""
        self._metrics.server_restarted(self.resource, reason)
        self._cancel_registration()
        self.registered_with = None
        if self._server is not None:
            await self._server.stop(grace=0)
            self._server = None
        await self.serve()
        self.register()

    def update(self, devices: Mapping[str, Device]) -> bool:
        """Take a new device list; True when the kubelet must hear new options."""
        self.devices = devices
        if self._server is None:
            return False
        servicer = self._server.servicer
        return servicer.update(devices) and servicer.refresh_options()

    def set_capabilities(self, capabilities: Capabilities) -> bool:
        """Swap the backend hooks; True when the kubelet must hear new options."""
        self.capabilities = capabilities
        return self._server is not None and self._server.servicer.set_capabilities(capabilities)

    async def problem(self, timeout: float) -> str | None:
        """None while registered with the running kubelet and answering; else what is wrong."""
        server = self._server
        if server is None or not self.serving:
            return "not serving"
        if not self.registered:
            return "not registered with the kubelet"
        return await server.answers(timeout)

    async def stop(self) -> None:
        self._cancel_registration()
        if self._register_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._register_task
        if self._server is not None:
            await self._server.stop()
            self._server = None
        log.info("resource %s: stopped", self.resource)

    # -- registration ----------------------------------------------------------

    @property
    def registered(self) -> bool:
        return self.registered_with is not None and self.registered_with == self._kubelet_identity()

    def register(self) -> None:
        """(Re)start registering now; retries with backoff until the kubelet accepts."""
        self._cancel_registration()
        self._backoff.reset()
        self._register_task = asyncio.create_task(
            self._register_until_accepted(), name=f"register {self.resource}"
        )
        self._register_task.add_done_callback(self._report_crash)

    def _report_crash(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "resource %s: registration loop crashed", self.resource, exc_info=task.exception()
            )

    def kick(self) -> None:
        """The kubelet socket appeared: retry a pending registration at once."""
        self._backoff.reset()
        self._kick.set()

    def kubelet_started(self, kubelet: int | None) -> None:
        """``kubelet.sock`` was created (identity ``kubelet``): a new kubelet forgot us."""
        if self.registered_with != kubelet:
            self.registered_with = None
            if self.serving:
                self.register()  # right now, not after the backoff
            else:
                self.kick()

    def check_registration(self, kubelet: int | None) -> None:
        """After a socket check: register again if the kubelet changed since we did."""
        if self.registered_with is not None and self.registered_with != kubelet:
            self.registered_with = None
            self.register()

    def _cancel_registration(self) -> None:
        if self._register_task is not None and not self._register_task.done():
            self._register_task.cancel()

    async def _register_until_accepted(self) -> None:
        failures = 0
        while True:
            identity = self._kubelet_identity()
            try:
                if self._server is None:
                    raise RegistrationError("not serving")
                await register(
                    self.kubelet_socket,
                    endpoint=self.socket_path.name,
                    resource=self.resource,
                    options=self._server.servicer.options(),
                    timeout=self._register_timeout,
                )
            except RegistrationError as exc:
                failures += 1
                self._metrics.registration_failed(self.resource)
                delay = self._backoff.next_delay()
                # Log the first failure loudly, then quietly until it works.
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(
                    level,
                    "resource %s: registration failed (%s); retrying in %.1fs",
                    self.resource,
                    exc,
                    delay,
                )
                self._kick.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), timeout=delay)
                continue
            self.registered_with = identity
            self.registrations += 1
            self._metrics.registered(self.resource)
            log.info(
                "resource %s: registered with the kubelet at %s", self.resource, self.kubelet_socket
            )
            return

    def status(self) -> PluginStatus:
        servicer = self._server.servicer if self._server else None
        return PluginStatus(
            resource=self.resource,
            serving=self.serving,
            registered=self.registered,
            devices=len(self.devices),
            healthy=sum(1 for d in self.devices.values() if d.healthy),
            open_streams=servicer.open_streams if servicer else 0,
            registrations=self.registrations,
        )
