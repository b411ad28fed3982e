"""The lifecycle of one resource's plugin: serve, register, re-register, stop.

Kept apart from the servicer (which only answers RPCs) and from the manager
(which decides which resources exist), like squat's lifecycle wrapper.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from accel_plugins.deviceplugin.kubelet_register import register
from accel_plugins.deviceplugin.plugin_server import PluginServer
from accel_plugins.deviceplugin.servicer import DevicePluginServicer
from accel_plugins.errors import RegistrationError
from accel_plugins.plugin.device import Device
from accel_plugins.runtime.backoff import Backoff
from accel_plugins.runtime.capabilities import Capabilities
from accel_plugins.runtime.recorder import NO_METRICS, PluginMetrics, RestartReason
from accel_plugins.runtime.status import PluginStatus

log = logging.getLogger(__name__)


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
