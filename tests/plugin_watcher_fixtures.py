"""Fixtures for plugin-watcher registration: a registry directory, the emulator watching it,
and ``StubRegistrar``, a test double of a plugin's registration socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import grpc
import pytest

from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.api import pluginregistration_v1_pb2_grpc as reg_grpc
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.client import unix_target
from accel_plugins.testing import short_tempdir

Status = tuple[bool, str]


def plugin_info(
    name: str,
    endpoint: Path | str,
    *,
    kind: str = "DevicePlugin",
    versions: Sequence[str] = ("v1beta1",),
) -> reg.PluginInfo:
    return reg.PluginInfo(
        type=kind, name=name, endpoint=str(endpoint), supported_versions=list(versions)
    )


class StubRegistrar(reg_grpc.RegistrationServicer):
    """A plugin's registration socket: answers GetInfo with ``info``, records notifications.

    ``also`` adds more services to the same server (a device plugin served on the
    registration socket itself, for an empty endpoint).
    """

    def __init__(
        self,
        socket_path: Path,
        info: reg.PluginInfo,
        *,
        also: Callable[[grpc.aio.Server], None] | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.info = info
        self.info_calls = 0
        self.statuses: list[Status] = []
        self._also = also
        self._changed = asyncio.Event()
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(self, server)
        if self._also is not None:
            self._also(server)
        server.add_insecure_port(unix_target(self.socket_path))
        await server.start()
        self._server = server

    async def stop(self, *, remove: bool = True) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(None)
        if remove:
            self.socket_path.unlink(missing_ok=True)

    def _note(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def GetInfo(
        self,
        request: reg.InfoRequest,
        context: grpc.aio.ServicerContext[reg.InfoRequest, reg.PluginInfo],
    ) -> reg.PluginInfo:
        self.info_calls += 1
        self._note()
        return self.info

    async def NotifyRegistrationStatus(
        self,
        request: reg.RegistrationStatus,
        context: grpc.aio.ServicerContext[reg.RegistrationStatus, reg.RegistrationStatusResponse],
    ) -> reg.RegistrationStatusResponse:
        self.statuses.append((request.plugin_registered, request.error))
        self._note()
        return reg.RegistrationStatusResponse()

    async def wait_for_status(self, count: int = 1, timeout: float = 5.0) -> Status:
        """The ``count``-th notification, once it arrived."""
        async with asyncio.timeout(timeout):
            while len(self.statuses) < count:
                await self._changed.wait()
        return self.statuses[count - 1]

    async def next_call(self) -> None:
        """Return at the next GetInfo or notification."""
        await self._changed.wait()


@pytest.fixture
def registry_dir() -> Iterator[Path]:
    """A plugins_registry directory directly under /tmp (socket paths stay short)."""
    with short_tempdir("pr-") as path:
        yield path


@pytest.fixture
def watcher_events() -> list[str]:
    """Every line the ``watching_kubelet`` fixture reported."""
    return []


@pytest.fixture
async def watching_kubelet(
    kubelet_dir: Path, registry_dir: Path, watcher_events: list[str]
) -> AsyncIterator[Kubelet]:
    """The emulator on ``kubelet_dir``, its plugin watcher on ``registry_dir``."""
    emulator = Kubelet(
        kubelet_dir,
        plugins_registry_dir=registry_dir,
        on_event=watcher_events.append,
        plugin_timeout=5.0,
    )
    async with emulator:
        yield emulator


@pytest.fixture
async def registrars() -> AsyncIterator[list[StubRegistrar]]:
    """Registrars a test appends here are stopped at teardown."""
    started: list[StubRegistrar] = []
    yield started
    for registrar in started:
        await registrar.stop()
