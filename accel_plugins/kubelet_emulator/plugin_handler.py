"""The device manager's plugin handler: plugins taken on, one ListAndWatch stream each.

A plugin comes by Register on the kubelet socket or through the plugin watcher
(a registration socket in the plugins registry); either way it is dialed, asked
its options before it is accepted, and gets an endpoint whose stream replaces
its resource's devices. A stream that ends or a registration socket that goes
away leaves the devices unhealthy until the plugin registers again. Every
registration and refusal is recorded, for tests and ``describe``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, NoReturn

import grpc

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.kubelet_emulator.client import PluginClient
from accel_plugins.kubelet_emulator.endpoint import Endpoint
from accel_plugins.kubelet_emulator.errors import KubeletError
from accel_plugins.kubelet_emulator.model import DeviceState, PluginOptions
from accel_plugins.kubelet_emulator.names import SUPPORTED_VERSIONS, resource_name_problem
from accel_plugins.kubelet_emulator.registration import (
    Registration,
    RegistrationRefusedError,
    Rejection,
    request_problem,
)
from accel_plugins.kubelet_emulator.state import ResourceState


class PluginHandler:
    """Registrations of device plugins and their streams, over the emulator's resources."""

    def __init__(
        self,
        plugin_dir: Path,
        resources: dict[str, ResourceState],
        *,
        plugin_timeout: float,
        event: Callable[[str], None],
        notify: Callable[[], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        running: Callable[[], bool],
    ) -> None:
        self.plugin_dir = plugin_dir
        self.plugin_timeout = plugin_timeout
        self.registrations: list[Registration] = []
        self.rejections: list[Rejection] = []
        # The emulator's own dict: it clears it on start and reads it to allocate.
        self._resources = resources
        self._event = event
        self._notify = notify
        self._spawn = spawn
        self._running = running

    def _refuse(self, request: pb.RegisterRequest, code: grpc.StatusCode, reason: str) -> NoReturn:
        self.rejections.append(
            Rejection(
                version=request.version,
                endpoint=request.endpoint,
                resource_name=request.resource_name,
                reason=reason,
                code=code,
                at=time.monotonic(),
            )
        )
        self._event(f"refused registration of {request.resource_name!r}: {reason}")
        self._notify()
        raise RegistrationRefusedError(code, reason)

    async def handle_register(self, request: pb.RegisterRequest) -> None:
        problem = request_problem(request)
        if problem is not None:
            self._refuse(request, grpc.StatusCode.INVALID_ARGUMENT, problem)
        await self._connect(request, self.plugin_dir / request.endpoint)

    async def _connect(
        self, request: pb.RegisterRequest, socket: Path, *, source: str = "register"
    ) -> Endpoint:
        """Dial a valid plugin's socket and take it on (Register and the plugin watcher)."""
        client = PluginClient(socket, timeout=self.plugin_timeout)
        client.open()
        try:
            # Asked before answering Register, as the kubelet does: a plugin that
            # cannot answer this is not registered at all.
            options = await client.options()
        except KubeletError as e:
            await client.close()
            self._refuse(
                request,
                grpc.StatusCode.UNAVAILABLE,
                f"cannot reach the plugin of {request.resource_name}: {e}",
            )
        except asyncio.CancelledError:
            await client.close()
            raise
        if not self._running():
            await client.close()
            raise RegistrationRefusedError(grpc.StatusCode.UNAVAILABLE, "kubelet is stopping")
        return self._install(request, client, options, source=source)

    async def register_watched(
        self, name: str, endpoint: str, versions: list[str], socket: Path
    ) -> Endpoint:
        """The device manager's plugin handler: validate, then connect as after Register."""
        version = next((v for v in versions if v in SUPPORTED_VERSIONS), None)
        # What Register would have carried, for the records (the plugin watcher has no request).
        request = pb.RegisterRequest(
            version=version or ",".join(versions), endpoint=endpoint, resource_name=name
        )
        if version is None:
            self._refuse(
                request,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"manager version, {SUPPORTED_VERSIONS[0]}, is not among plugin supported "
                f"versions {versions}",
            )
        problem = resource_name_problem(name)
        if problem is not None:
            self._refuse(request, grpc.StatusCode.INVALID_ARGUMENT, problem)
        return await self._connect(request, Path(endpoint), source=f"plugin watcher ({socket})")

    async def deregister_watched(self, endpoint: Endpoint, socket: Path) -> None:
        """The plugin's registration socket is gone: close its stream, devices unhealthy."""
        state = self._current(endpoint)
        await endpoint.stop()
        if state is None:
            return  # replaced since by another registration
        state.disconnect()
        self._event(
            f"deregistered {endpoint.resource}: registration socket {socket} is gone; "
            "devices unhealthy until it registers again"
        )
        self._notify()

    def _install(
        self,
        request: pb.RegisterRequest,
        client: PluginClient,
        options: PluginOptions,
        *,
        source: str = "register",
    ) -> Endpoint:
        name = request.resource_name
        self.registrations.append(
            Registration(
                version=request.version,
                endpoint=request.endpoint,
                resource_name=name,
                # What a Register request carried; the plugin watcher has only the answer.
                options=PluginOptions.from_proto(request.options)
                if source == "register"
                else options,
                at=time.monotonic(),
                source=source,
            )
        )
        state = self._resources.setdefault(name, ResourceState(name, options))
        old = state.endpoint
        endpoint = Endpoint(name, client, options, on_devices=self._on_devices, on_end=self._on_end)
        # The previous endpoint's devices stay until the new stream reports.
        state.endpoint, state.options, state.connected = endpoint, options, True
        if old is not None:
            self._spawn(old.stop())
        endpoint.start()
        via = "" if source == "register" else f" by the {source}"
        self._event(
            f"registered {name} at {request.endpoint}{via} ({request.version}; "
            f"pre_start_required={options.pre_start_required}, "
            f"get_preferred_allocation_available={options.get_preferred_allocation_available})"
        )
        self._notify()
        return endpoint

    def _current(self, endpoint: Endpoint) -> ResourceState | None:
        state = self._resources.get(endpoint.resource)
        return state if state is not None and state.endpoint is endpoint else None

    def _on_devices(self, endpoint: Endpoint, devices: Sequence[DeviceState]) -> None:
        state = self._current(endpoint)
        if state is None:
            return
        change = state.replace_devices(list(devices))
        self._event(f"{endpoint.resource}: {change}")
        self._notify()

    def _on_end(self, endpoint: Endpoint, error: KubeletError | None) -> None:
        state = self._current(endpoint)
        if state is None:
            return
        state.disconnect()
        self._spawn(endpoint.client.close())
        self._event(
            f"{endpoint.resource}: ListAndWatch stream ended "
            f"({error or 'closed by the plugin'}); devices unhealthy until it re-registers"
        )
        self._notify()
