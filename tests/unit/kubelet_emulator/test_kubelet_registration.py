"""The Registration service of the emulated kubelet, over real unix sockets."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from accel_plugins.kubelet_emulator import Kubelet, PluginOptions
from tests.fixtures.kubelet import RESOURCE, MakePlugin, register, widgets


async def test_accepted_registration_is_recorded_and_streamed(
    kubelet: Kubelet, make_plugin: MakePlugin, kubelet_events: list[str]
) -> None:
    options = PluginOptions(pre_start_required=True, get_preferred_allocation_available=True)
    plugin = await make_plugin(widgets(2), options=options)

    await register(kubelet, plugin)

    [registration] = kubelet.registrations
    assert (registration.version, registration.endpoint, registration.resource_name) == (
        "v1beta1",
        "widget.sock",
        RESOURCE,
    )
    assert registration.options == options
    assert kubelet.rejections == []
    assert kubelet.resources[RESOURCE].options == options
    assert any(line.startswith(f"registered {RESOURCE}") for line in kubelet_events)


async def test_options_are_asked_before_register_answers(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(1))

    await plugin.register(kubelet.socket_path)

    # Register has returned: the kubelet must already have asked for the options.
    assert plugin.calls[0] == "GetDevicePluginOptions"
    assert len(kubelet.registrations) == 1


@pytest.mark.parametrize(
    ("version", "resource", "endpoint", "reason"),
    [
        pytest.param("v1alpha", RESOURCE, None, "not supported", id="old-version"),
        pytest.param("", RESOURCE, None, "not supported", id="no-version"),
        pytest.param("v1beta1", "nvidia.com/", None, "name part must be non-empty", id="no-name"),
        pytest.param("v1beta1", "gpu", None, "no domain prefix", id="no-domain"),
        pytest.param("v1beta1", "kubernetes.io/foo", None, "native", id="kubernetes-io"),
        pytest.param("v1beta1", "requests.a.com/x", None, "quota", id="requests-prefix"),
        pytest.param("v1beta1", "a.com/" + "x" * 64, None, "63", id="name-too-long"),
        pytest.param("v1beta1", "a" * 250 + "/x", None, "244", id="domain-too-long"),
        pytest.param("v1beta1", RESOURCE, "", "endpoint", id="no-endpoint"),
        pytest.param("v1beta1", RESOURCE, "/abs.sock", "relative", id="absolute-endpoint"),
    ],
)
async def test_invalid_registrations_are_refused(
    kubelet: Kubelet,
    make_plugin: MakePlugin,
    version: str,
    resource: str,
    endpoint: str | None,
    reason: str,
) -> None:
    plugin = await make_plugin(widgets(1))

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await plugin.register(kubelet.socket_path, resource, version=version, endpoint=endpoint)

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in (caught.value.details() or "")
    [rejection] = kubelet.rejections
    assert rejection.resource_name == resource
    assert rejection.reason == caught.value.details()
    assert kubelet.registrations == []
    assert kubelet.resources == {}
    # Refused before dialing: the plugin was never contacted.
    assert plugin.calls == []


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param("no-socket", id="nobody-at-endpoint"),
        pytest.param("options-error", id="options-call-fails"),
    ],
)
async def test_unreachable_plugin_is_refused(
    kubelet: Kubelet, make_plugin: MakePlugin, failure: str
) -> None:
    plugin = await make_plugin(widgets(1))
    endpoint = None
    if failure == "no-socket":
        endpoint = "missing.sock"
    else:
        plugin.errors["GetDevicePluginOptions"] = (grpc.StatusCode.INTERNAL, "boom")

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await plugin.register(kubelet.socket_path, endpoint=endpoint)

    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "GetDevicePluginOptions" in (caught.value.details() or "")
    assert len(kubelet.rejections) == 1
    assert kubelet.registrations == []
    assert RESOURCE not in kubelet.resources


async def test_reregistration_replaces_the_endpoint(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    first = await make_plugin(widgets(2), name="first")
    await register(kubelet, first)
    second = await make_plugin(widgets(3), name="second")
    second.list_gate.clear()

    await second.register(kubelet.socket_path)
    async with asyncio.timeout(5):
        await second.stream_opened.wait()
    # Until the new stream reports, the old device set stays.
    assert kubelet.resources[RESOURCE].capacity == 2
    second.list_gate.set()
    await kubelet.wait_for(lambda k: k.resources[RESOURCE].capacity == 3)

    assert [r.endpoint for r in kubelet.registrations] == ["first.sock", "second.sock"]
    # The old plugin's updates no longer count.
    first.set_devices(widgets(5))
    second.set_devices(widgets(4))
    await kubelet.wait_for(lambda k: k.resources[RESOURCE].capacity == 4)
    assert kubelet.resources[RESOURCE].connected


async def test_two_resources_are_tracked_apart(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    widget = await make_plugin(widgets(2), name="widget")
    gadget = await make_plugin(widgets(1), name="gadget")

    await register(kubelet, widget, "example.com/widget")
    await register(kubelet, gadget, "example.com/gadget")

    assert {name: view.capacity for name, view in kubelet.resources.items()} == {
        "example.com/widget": 2,
        "example.com/gadget": 1,
    }


async def test_wait_for_times_out_with_the_state(kubelet: Kubelet) -> None:
    with pytest.raises(TimeoutError) as caught:
        await kubelet.wait_for(lambda k: "nothing" in k.resources, timeout=0.05)

    message = str(caught.value)
    assert '"nothing" in k.resources' in message
    assert "registrations: []" in message
