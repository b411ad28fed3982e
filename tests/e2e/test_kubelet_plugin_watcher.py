"""The emulator's plugin watcher against stub plugins, over real unix sockets.

Sockets appear, vanish and are replaced in the registry directory; the emulator
registers what it finds the way the kubelet's plugin watcher and the device
manager's plugin handler do, and tells each plugin with NotifyRegistrationStatus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.kubelet_emulator import Kubelet, PluginOptions
from accel_plugins.testing import short_tempdir
from tests.fixtures.kubelet import RESOURCE, MakePlugin, StubPlugin, widgets
from tests.fixtures.plugin_watcher import StubRegistrar, plugin_info


def connected(resource: str, devices: int) -> Callable[[Kubelet], bool]:
    def check(k: Kubelet) -> bool:
        view = k.resources.get(resource)
        return view is not None and view.connected and view.allocatable == devices

    return check


async def serve_registrar(
    registrars: list[StubRegistrar],
    path: Path,
    info: reg.PluginInfo,
    *,
    also: Callable[[grpc.aio.Server], None] | None = None,
) -> StubRegistrar:
    registrar = StubRegistrar(path, info, also=also)
    await registrar.start()
    registrars.append(registrar)
    return registrar


@pytest.fixture
def elsewhere() -> Iterator[Path]:
    """A directory the emulator neither watches nor wipes."""
    with short_tempdir("pe-") as path:
        yield path


async def test_a_socket_that_appears_is_registered_and_told_so(
    watching_kubelet: Kubelet,
    registry_dir: Path,
    make_plugin: MakePlugin,
    registrars: list[StubRegistrar],
    watcher_events: list[str],
) -> None:
    options = PluginOptions(get_preferred_allocation_available=True)
    plugin = await make_plugin(widgets(3), options=options)
    registrar = await serve_registrar(
        registrars, registry_dir / "widget.sock", plugin_info(RESOURCE, plugin.socket_path)
    )

    assert await registrar.wait_for_status() == (True, "")
    await watching_kubelet.wait_for(connected(RESOURCE, 3))
    [registration] = watching_kubelet.registrations
    assert registration.endpoint == str(plugin.socket_path)  # absolute, as GetInfo named it
    assert registration.version == "v1beta1"
    assert registration.options == options  # from GetDevicePluginOptions: no request here
    assert registration.source == f"plugin watcher ({registrar.socket_path})"
    assert plugin.calls[0] == "GetDevicePluginOptions"  # asked before the notification
    assert watching_kubelet.rejections == []
    assert any("by the plugin watcher" in line for line in watcher_events)


async def test_sockets_present_at_start_are_registered_again_after_a_restart(
    kubelet_dir: Path,
    registry_dir: Path,
    elsewhere: Path,
    registrars: list[StubRegistrar],
) -> None:
    plugin = StubPlugin(elsewhere / "widget.sock", widgets(2))
    await plugin.start()
    try:
        registrar = await serve_registrar(
            registrars, registry_dir / "widget.sock", plugin_info(RESOURCE, plugin.socket_path)
        )
        async with Kubelet(kubelet_dir, plugins_registry_dir=registry_dir) as kubelet:
            assert await registrar.wait_for_status() == (True, "")
            await kubelet.wait_for(connected(RESOURCE, 2))

            await kubelet.restart()  # the registry is not wiped: the socket is found again
            assert await registrar.wait_for_status(2) == (True, "")
            await kubelet.wait_for(connected(RESOURCE, 2))
            assert len(kubelet.registrations) == 2
    finally:
        await plugin.stop()


async def test_a_vanished_socket_is_deregistered(
    watching_kubelet: Kubelet,
    registry_dir: Path,
    make_plugin: MakePlugin,
    registrars: list[StubRegistrar],
    watcher_events: list[str],
) -> None:
    plugin = await make_plugin(widgets(2))
    registrar = await serve_registrar(
        registrars, registry_dir / "widget.sock", plugin_info(RESOURCE, plugin.socket_path)
    )
    await watching_kubelet.wait_for(connected(RESOURCE, 2))

    await registrar.stop()  # and its socket file removed

    await watching_kubelet.wait_for(lambda k: not k.resources[RESOURCE].connected)
    view = watching_kubelet.resources[RESOURCE]
    assert (view.capacity, view.allocatable) == (2, 0)  # kept, all unhealthy
    assert any(line.startswith(f"deregistered {RESOURCE}") for line in watcher_events)


async def test_a_replaced_socket_is_deregistered_then_registered_anew(
    watching_kubelet: Kubelet,
    registry_dir: Path,
    make_plugin: MakePlugin,
    registrars: list[StubRegistrar],
) -> None:
    first = await make_plugin(widgets(2), name="first")
    second = await make_plugin(widgets(5), name="second")
    path = registry_dir / "widget.sock"
    old = await serve_registrar(registrars, path, plugin_info(RESOURCE, first.socket_path))
    await watching_kubelet.wait_for(connected(RESOURCE, 2))

    # A new socket at the same path, leading to another endpoint.
    await old.stop(remove=False)
    new = await serve_registrar(registrars, path, plugin_info(RESOURCE, second.socket_path))

    assert await new.wait_for_status() == (True, "")
    await watching_kubelet.wait_for(connected(RESOURCE, 5))
    assert [r.endpoint for r in watching_kubelet.registrations] == [
        str(first.socket_path),
        str(second.socket_path),
    ]
    assert old.statuses == [(True, "")]


async def test_dotfiles_and_other_files_are_ignored_subdirectories_are_watched(
    watching_kubelet: Kubelet,
    registry_dir: Path,
    make_plugin: MakePlugin,
    registrars: list[StubRegistrar],
) -> None:
    plugin = await make_plugin(widgets(1))
    info = plugin_info(RESOURCE, plugin.socket_path)
    hidden = await serve_registrar(registrars, registry_dir / ".hidden.sock", info)
    (registry_dir / "notes.txt").write_text("not a socket\n")
    (registry_dir / "vendor").mkdir()
    nested = await serve_registrar(registrars, registry_dir / "vendor" / "widget.sock", info)

    assert await nested.wait_for_status() == (True, "")
    assert hidden.info_calls == 0
    assert watching_kubelet.rejections == []


async def test_an_empty_endpoint_means_the_registration_socket_itself(
    watching_kubelet: Kubelet, registry_dir: Path, registrars: list[StubRegistrar]
) -> None:
    plugin = StubPlugin(registry_dir / "both.sock", widgets(2))  # not started: shares a server

    def serve_device_plugin(server: grpc.aio.Server) -> None:
        pb_grpc.add_DevicePluginServicer_to_server(plugin, server)

    registrar = await serve_registrar(
        registrars, plugin.socket_path, plugin_info(RESOURCE, ""), also=serve_device_plugin
    )

    assert await registrar.wait_for_status() == (True, "")
    await watching_kubelet.wait_for(connected(RESOURCE, 2))
    assert watching_kubelet.registrations[-1].endpoint == str(registrar.socket_path)


async def test_another_plugin_type_has_no_handler_and_is_tried_again(
    watching_kubelet: Kubelet, registry_dir: Path, registrars: list[StubRegistrar]
) -> None:
    path = registry_dir / "csi.sock"
    registrar = await serve_registrar(
        registrars, path, plugin_info("csi.example.com", "", kind="CSIPlugin")
    )

    registered, error = await registrar.wait_for_status()
    assert not registered
    assert error == (
        f"RegisterPlugin error -- no handler registered for plugin type: CSIPlugin at socket {path}"
    )
    # The kubelet's reconciler tries again after its backoff (0.5 s first).
    assert await registrar.wait_for_status(2) == (False, error)
    assert watching_kubelet.registrations == []


@pytest.mark.parametrize(
    ("name", "versions", "reason"),
    [
        pytest.param("widget", ["v1beta1"], "no domain prefix", id="no-domain"),
        pytest.param("kubernetes.io/widget", ["v1beta1"], "native", id="kubernetes-io"),
        pytest.param(
            RESOURCE,
            ["v1alpha1", "v2"],
            "manager version, v1beta1, is not among plugin supported versions",
            id="no-common-version",
        ),
    ],
)
async def test_an_invalid_plugin_is_refused_notified_and_tried_again(
    watching_kubelet: Kubelet,
    registry_dir: Path,
    make_plugin: MakePlugin,
    registrars: list[StubRegistrar],
    name: str,
    versions: list[str],
    reason: str,
) -> None:
    plugin = await make_plugin(widgets(1))
    registrar = await serve_registrar(
        registrars,
        registry_dir / "widget.sock",
        plugin_info(name, plugin.socket_path, versions=versions),
    )

    registered, error = await registrar.wait_for_status()
    assert not registered
    assert error.startswith("RegisterPlugin error -- plugin validation failed with err: ")
    assert reason in error
    [rejection] = watching_kubelet.rejections
    assert (rejection.resource_name, rejection.code) == (name, grpc.StatusCode.INVALID_ARGUMENT)
    assert plugin.calls == []  # never dialled
    assert (await registrar.wait_for_status(2))[0] is False  # the reconciler tries again


async def test_an_unreachable_endpoint_is_notified_and_kept_until_the_socket_is_replaced(
    watching_kubelet: Kubelet,
    registry_dir: Path,
    kubelet_dir: Path,
    registrars: list[StubRegistrar],
) -> None:
    endpoint = kubelet_dir / "later.sock"
    path = registry_dir / "widget.sock"
    registrar = await serve_registrar(registrars, path, plugin_info(RESOURCE, endpoint))

    registered, error = await registrar.wait_for_status()
    assert not registered
    assert error.startswith("RegisterPlugin error -- plugin registration failed with err: ")
    assert f"cannot reach the plugin of {RESOURCE}" in error
    assert watching_kubelet.rejections[-1].code == grpc.StatusCode.UNAVAILABLE
    # As in the kubelet, the socket stays in its actual state: no retry by itself.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(registrar.next_call(), timeout=1.5)
    assert registrar.info_calls == 1

    plugin = StubPlugin(endpoint, widgets(2))
    await plugin.start()
    try:
        await registrar.stop(remove=False)
        again = await serve_registrar(registrars, path, plugin_info(RESOURCE, endpoint))
        assert await again.wait_for_status() == (True, "")
        await watching_kubelet.wait_for(connected(RESOURCE, 2))
    finally:
        await plugin.stop()


async def test_stopping_cancels_what_is_pending(
    kubelet_dir: Path, registry_dir: Path, registrars: list[StubRegistrar]
) -> None:
    # A socket nobody answers on: the watcher is retrying it when the kubelet stops.
    registrar = await serve_registrar(
        registrars, registry_dir / "mute.sock", plugin_info("x.io/csi", "", kind="CSIPlugin")
    )
    kubelet = Kubelet(kubelet_dir, plugins_registry_dir=registry_dir)
    await kubelet.start()
    await registrar.wait_for_status()
    await asyncio.wait_for(kubelet.stop(), timeout=2)
    assert not kubelet.running
