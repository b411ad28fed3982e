"""The framework in plugin-watcher mode: the Manager serves a registration socket per
resource and the kubelet emulator's plugin watcher registers it, over real unix sockets."""

from __future__ import annotations

import asyncio
import contextlib
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest

from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.api import pluginregistration_v1_pb2_grpc as reg_grpc
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.errors import ConfigError
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.client import unix_target
from accel_plugins.plugin.device import Device, tree
from accel_plugins.runtime.recorder import NoMetrics
from tests.fixtures.framework import LogWaiter, ScriptedBackend
from tests.support.metrics import MetricsNode, series

WIDGET = "example.com/widget"
SOCKET_NAME = "example.com_widget.sock"
RES = ("resource", WIDGET)


class Registrations(NoMetrics):
    """Counts what the manager reports about registration, and lets a test await it."""

    def __init__(self) -> None:
        self.accepted = 0
        self.failed = 0
        self._changed = asyncio.Event()

    def registered(self, resource: str) -> None:
        self.accepted += 1
        self._changed.set()

    def registration_failed(self, resource: str) -> None:
        self.failed += 1
        self._changed.set()

    async def wait(self, what: Callable[[Registrations], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not what(self):
                self._changed.clear()
                await self._changed.wait()


class Node:
    """A Manager in plugin-watcher mode on a scripted backend, with its registration counts."""

    def __init__(self, kubelet_dir: Path, registry_dir: Path, devices: int = 3) -> None:
        self.backend = ScriptedBackend(tree({WIDGET: [Device(f"w{i}") for i in range(devices)]}))
        self.counts = Registrations()
        settings = ManagerSettings(
            plugin_dir=kubelet_dir,
            registration="plugin-watcher",
            plugins_registry_dir=registry_dir,
            backoff_max=0.5,
        )
        self.manager = Manager(lambda: self.backend, settings, metrics=self.counts)
        self.socket = registry_dir / SOCKET_NAME
        self.endpoint = kubelet_dir / SOCKET_NAME
        self.task = asyncio.create_task(self.manager.run())

    @property
    def registered(self) -> bool:
        status = self.manager.status().get(WIDGET)
        return status is not None and status.registered

    async def stop(self) -> None:
        await self.manager.stop()
        await self.task


@pytest.fixture
async def node(kubelet_dir: Path, registry_dir: Path) -> AsyncIterator[Node]:
    running = Node(kubelet_dir, registry_dir)
    yield running
    if not running.task.done():
        await running.stop()


def connected(devices: int) -> Callable[[Kubelet], bool]:
    def check(k: Kubelet) -> bool:
        view = k.resources.get(WIDGET)
        return view is not None and view.connected and view.allocatable == devices

    return check


@contextlib.asynccontextmanager
async def registration_stub(socket: Path) -> AsyncIterator[reg_grpc.RegistrationAsyncStub]:
    async with grpc.aio.insecure_channel(unix_target(socket)) as channel:
        yield reg_grpc.RegistrationStub(channel)


async def test_registered_by_the_plugin_watcher(watching_kubelet: Kubelet, node: Node) -> None:
    await watching_kubelet.wait_for(connected(3))
    await node.counts.wait(lambda c: c.accepted == 1)

    assert node.registered
    assert node.manager.status()[WIDGET].registrations == 1
    assert stat.S_ISSOCK(node.socket.stat().st_mode)
    assert stat.S_IMODE(node.socket.stat().st_mode) == 0o600
    [registration] = watching_kubelet.registrations
    assert registration.endpoint == str(node.endpoint)
    assert registration.source == f"plugin watcher ({node.socket})"
    assert watching_kubelet.rejections == []

    async with registration_stub(node.socket) as stub:
        info = await stub.GetInfo(reg.InfoRequest(), timeout=5)
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "DevicePlugin",
        WIDGET,
        str(node.endpoint),
        ["v1beta1"],
    )


async def test_a_kubelet_restart_registers_it_again(watching_kubelet: Kubelet, node: Node) -> None:
    await node.counts.wait(lambda c: c.accepted == 1)

    for restarts in range(1, 4):
        await watching_kubelet.restart()  # wipes the device plugin socket, not the registry
        await watching_kubelet.wait_for(connected(3))

        def again(counts: Registrations, before: int = restarts) -> bool:
            return counts.accepted > before and node.registered

        await node.counts.wait(again)

    assert node.manager.status()[WIDGET].serving


async def test_a_removed_registration_socket_is_served_again(
    watching_kubelet: Kubelet, node: Node, watcher_events: list[str]
) -> None:
    await node.counts.wait(lambda c: c.accepted == 1)

    node.socket.unlink()  # the kubelet forgets the plugin; inotify tells the manager

    await node.counts.wait(lambda c: c.accepted == 2 and node.registered)
    await watching_kubelet.wait_for(connected(3))
    assert len(watching_kubelet.registrations) == 2
    assert any(line.startswith(f"deregistered {WIDGET}") for line in watcher_events)


async def test_a_refusal_is_counted_logged_and_answered_with_a_new_socket(
    watching_kubelet: Kubelet, node: Node, logs: LogWaiter
) -> None:
    await node.counts.wait(lambda c: c.accepted == 1)

    async with registration_stub(node.socket) as stub:
        await stub.NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=False, error="no room for widgets"), timeout=5
        )

    assert node.counts.failed == 1
    assert not node.registered
    await logs.wait_for("the kubelet did not register it (no room for widgets)")
    # A new socket is offered after the backoff, and the plugin watcher takes it.
    await node.counts.wait(lambda c: c.accepted == 2 and node.registered)
    assert len(watching_kubelet.registrations) == 2


async def test_stop_removes_both_sockets_and_the_kubelet_lets_go(
    watching_kubelet: Kubelet, node: Node
) -> None:
    await watching_kubelet.wait_for(connected(3))

    await node.stop()

    assert not node.socket.exists()
    assert not node.endpoint.exists()
    await watching_kubelet.wait_for(lambda k: not k.resources[WIDGET].connected)


SERVING = "for the kubelet's plugin watcher"  # logged once the registration socket is served


async def test_without_a_kubelet_it_serves_and_waits(node: Node, logs: LogWaiter) -> None:
    await logs.wait_for(SERVING)
    assert stat.S_ISSOCK(node.socket.stat().st_mode)
    assert not node.registered

    async with registration_stub(node.socket) as stub:
        assert (await stub.GetInfo(reg.InfoRequest(), timeout=5)).name == WIDGET
        await stub.NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=True), timeout=5
        )
    assert node.registered
    assert node.counts.accepted == 1


async def test_a_stale_file_at_the_socket_path_is_replaced(
    kubelet_dir: Path, registry_dir: Path, watching_kubelet: Kubelet
) -> None:
    (registry_dir / SOCKET_NAME).write_text("left behind\n")
    running = Node(kubelet_dir, registry_dir)
    try:
        await running.counts.wait(lambda c: c.accepted == 1)
        assert stat.S_ISSOCK(running.socket.stat().st_mode)
    finally:
        await running.stop()


def test_an_unknown_registration_mode_is_a_config_error(kubelet_dir: Path) -> None:
    with pytest.raises(ConfigError, match="'watcher' is not one of kubelet, plugin-watcher"):
        ManagerSettings(plugin_dir=kubelet_dir, registration="watcher")  # type: ignore[arg-type]


async def test_metrics_and_healthz_follow_the_notifications(
    kubelet_dir: Path, registry_dir: Path, logs: LogWaiter
) -> None:
    backend = ScriptedBackend(tree({WIDGET: [Device("w0"), Device("w1")]}))
    socket = registry_dir / SOCKET_NAME
    async with MetricsNode(
        lambda: backend,
        kubelet_dir,
        registration="plugin-watcher",
        plugins_registry_dir=registry_dir,
    ) as running:
        await logs.wait_for(SERVING)
        # No kubelet has registered it yet.
        assert await running.get("/healthz") == (
            503,
            f"{WIDGET}: not registered with the kubelet\n",
        )

        async with registration_stub(socket) as stub:
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=True), timeout=5
            )
        assert await running.get("/healthz") == (200, "ok\n")
        values = await running.scrape()
        assert series(values, "accel_plugins_registrations_total") == {(RES,): 1}
        assert series(values, "accel_plugins_resource_registered") == {(RES,): 1}

        async with registration_stub(socket) as stub:
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=False, error="full"), timeout=5
            )
        values = await running.scrape()
        assert series(values, "accel_plugins_registration_failures_total") == {(RES,): 1}
        assert series(values, "accel_plugins_resource_registered") == {(RES,): 0}
        status, body = await running.get("/healthz")
        assert (status, body) == (503, f"{WIDGET}: not registered with the kubelet\n")
