"""Fixtures for framework tests: an in-test backend and a served plugin."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.deviceplugin.plugin_server import PluginServer
from accel_plugins.deviceplugin.servicer import DevicePluginServicer
from accel_plugins.plugin.backend import Backend, Publish
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceTree
from accel_plugins.runtime.capabilities import Capabilities
from accel_plugins.testing import ServedBackend, short_tempdir


class ScriptedBackend:
    """A backend whose snapshots the test sets by hand (stands in for hardware)."""

    def __init__(self, tree: DeviceTree | None = None) -> None:
        self.tree: DeviceTree = tree or {}
        self._publish: Publish | None = None
        self.started = asyncio.Event()
        self.runs = 0

    async def run(self, publish: Publish) -> None:
        self._publish = publish
        self.runs += 1
        publish(self.tree)
        self.started.set()
        await asyncio.Event().wait()

    def set(self, tree: DeviceTree) -> None:
        self.tree = tree
        if self._publish is not None:
            self._publish(tree)


class HookedBackend(ScriptedBackend):
    """Also implements every optional capability, recording the calls."""

    def __init__(self, tree: DeviceTree | None = None) -> None:
        super().__init__(tree)
        self.pre_started: list[list[str]] = []
        self.pre_start_error: Exception | None = None

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation:
        return ContainerAllocation(envs={"HOOKED": ",".join(d.id for d in devices)})

    def preferred_allocation(
        self,
        resource: str,
        available: Sequence[Device],
        must_include: Sequence[Device],
        size: int,
    ) -> Sequence[str]:
        # Prefers the highest IDs, which the default policy never would.
        must = [d.id for d in must_include]
        rest = sorted((d.id for d in available if d.id not in must), reverse=True)
        return must + rest[: size - len(must)]

    def pre_start(self, resource: str, devices: Sequence[Device]) -> None:
        if self.pre_start_error is not None:
            raise self.pre_start_error
        self.pre_started.append([d.id for d in devices])


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes and pytest's tmp paths are
    # long, so plugin dirs live directly under /tmp.
    with short_tempdir("ap-") as path:
        yield path


class Served:
    def __init__(self, servicer: DevicePluginServicer, server: PluginServer) -> None:
        self.servicer = servicer
        self.server = server
        self.channel = grpc.aio.insecure_channel(f"unix://{server.socket_path}")
        self.stub = pb_grpc.DevicePluginStub(self.channel)


ServePlugin = Callable[..., Awaitable[Served]]


@pytest.fixture
async def serve_plugin(plugin_dir: Path) -> AsyncIterator[ServePlugin]:
    """Factory: serve a servicer for `resource` over a real unix socket."""
    started: list[Served] = []

    async def start(
        devices: dict[str, Device],
        capabilities: Capabilities | None = None,
        resource: str = "example.com/widget",
    ) -> Served:
        servicer = DevicePluginServicer(resource, capabilities or Capabilities(), devices)
        server = PluginServer(servicer, plugin_dir / f"test-{len(started)}.sock")
        await server.start()
        served = Served(servicer, server)
        started.append(served)
        return served

    yield start
    for served in started:
        await served.channel.close(None)
        await served.server.stop(grace=0)


# The plugin's handle: .manager, .task (running manager.run()), .stop().
RunningManager = ServedBackend

StartManager = Callable[..., Awaitable[RunningManager]]


@pytest.fixture
async def start_manager(kubelet_dir: Path) -> AsyncIterator[StartManager]:
    """Factory: run a Manager for a backend (or factory) against ``kubelet_dir``.

    ``accel_serve`` without its kubelet: these tests start (or withhold) the
    emulator themselves, and may crash backends on purpose.
    """
    running: list[RunningManager] = []

    async def start(backend: Backend | Callable[[], Backend], **settings: Any) -> RunningManager:
        options = {"plugin_dir": kubelet_dir} | settings
        handle = ServedBackend.start(backend, **options, expect_crashes=True)
        running.append(handle)
        return handle

    yield start
    for handle in running:
        await handle.stop()  # raises a crash of run() as a test error


class LogWaiter(logging.Handler):
    """Lets a test await a log message instead of polling for it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []
        self._changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self._changed.set()

    async def wait_for(self, text: str, timeout: float = 5.0) -> str:
        async with asyncio.timeout(timeout):
            while True:
                for message in self.messages:
                    if text in message:
                        return message
                self._changed.clear()
                await self._changed.wait()


@pytest.fixture
def logs() -> Iterator[LogWaiter]:
    waiter = LogWaiter()
    root = logging.getLogger()
    root.addHandler(waiter)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    yield waiter
    root.removeHandler(waiter)
    root.setLevel(old_level)


class TreeRecorder:
    """A ``publish`` callback that keeps every tree and wakes waiters."""

    def __init__(self) -> None:
        self.trees: list[DeviceTree] = []
        self._changed = asyncio.Event()

    def __call__(self, tree: DeviceTree) -> None:
        self.trees.append(tree)
        self._changed.set()

    @property
    def latest(self) -> DeviceTree:
        assert self.trees, "nothing published yet"
        return self.trees[-1]

    async def wait_for(
        self, predicate: Callable[[DeviceTree], bool], timeout: float = 5.0
    ) -> DeviceTree:
        async with asyncio.timeout(timeout):
            while not (self.trees and predicate(self.trees[-1])):
                self._changed.clear()
                await self._changed.wait()
        return self.trees[-1]

    def health(self, resource: str, device_id: str) -> str:
        return str(self.latest[resource][device_id].health)
