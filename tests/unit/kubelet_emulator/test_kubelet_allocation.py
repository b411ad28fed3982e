"""Allocation through the emulated kubelet: device choice, plugin calls, errors."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from accel_plugins.kubelet_emulator import (
    AllocationConflictError,
    InsufficientDevicesError,
    InvalidPluginAnswerError,
    Kubelet,
    KubeletError,
    PluginCallError,
    PluginOptions,
    ResourceUnavailableError,
    UnknownResourceError,
)
from accel_plugins.kubelet_emulator.model import DeviceSpec, MountSpec
from tests.fixtures.kubelet import RESOURCE, MakePlugin, register, widgets

PREFERRED = PluginOptions(get_preferred_allocation_available=True)
PRE_START = PluginOptions(pre_start_required=True)


async def test_without_preference_the_first_sorted_healthy_devices_are_taken(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(4, unhealthy=["w0"]))
    await register(kubelet, plugin)

    record = await kubelet.allocate("pod-a", "main", RESOURCE, 2)

    assert record.device_ids == ("w1", "w2")
    assert plugin.allocate_requests == [[["w1", "w2"]]]
    assert "GetPreferredAllocation" not in plugin.calls
    assert "PreStartContainer" not in plugin.calls
    assert kubelet.allocations == [record]


async def test_the_allocate_response_is_recorded(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)

    record = await kubelet.allocate("pod-a", "main", RESOURCE, 1, namespace="ml")

    assert (record.namespace, record.pod, record.container, record.resource) == (
        "ml",
        "pod-a",
        "main",
        RESOURCE,
    )
    response = record.response
    assert dict(response.envs) == {"WIDGETS": "w0"}
    assert response.mounts == (MountSpec("/opt/widget", "/usr/lib/widget", True),)
    assert response.devices == (DeviceSpec("/dev/w0", "/dev/w0", "rw"),)
    assert dict(response.annotations) == {"example.com/widgets": "w0"}
    assert response.cdi_devices == ("example.com/widget=w0",)


async def test_preferred_allocation_is_asked_and_used(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    # The stub prefers the highest ids, which the default would never pick.
    plugin = await make_plugin(widgets(4), options=PREFERRED)
    await register(kubelet, plugin)
    await kubelet.allocate("pod-a", "main", RESOURCE, 1)

    record = await kubelet.allocate("pod-b", "main", RESOURCE, 2)

    assert plugin.preferred_requests[-1] == (["w0", "w1", "w2"], [], 2)
    assert record.device_ids == ("w1", "w2")
    assert plugin.allocate_requests[-1] == [["w1", "w2"]]


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        pytest.param(["w0"], "returned 1 device(s) for a request of 2", id="too-few"),
        pytest.param(["w0", "w0"], "repeated device(s) w0", id="duplicate"),
        pytest.param(["w0", "w9"], "not offered as available: w9", id="unknown-device"),
    ],
)
async def test_invalid_preferred_allocation_is_refused(
    kubelet: Kubelet, make_plugin: MakePlugin, answer: list[str], problem: str
) -> None:
    plugin = await make_plugin(
        widgets(3), options=PREFERRED, preferred=lambda available, must, size: answer
    )
    await register(kubelet, plugin)

    with pytest.raises(InvalidPluginAnswerError, match="GetPreferredAllocation") as caught:
        await kubelet.allocate("pod-a", "main", RESOURCE, 2)

    assert problem in str(caught.value)
    assert plugin.allocate_requests == []
    assert kubelet.allocations == []


async def test_pre_start_is_called_when_required(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(2), options=PRE_START)
    await register(kubelet, plugin)

    await kubelet.allocate("pod-a", "main", RESOURCE, 2)

    assert plugin.pre_start_requests == [["w0", "w1"]]
    assert plugin.calls[-2:] == ["Allocate", "PreStartContainer"]


async def test_allocated_devices_are_not_handed_out_twice(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(3))
    await register(kubelet, plugin)
    first = await kubelet.allocate("pod-a", "main", RESOURCE, 2)

    with pytest.raises(InsufficientDevicesError) as caught:
        await kubelet.allocate("pod-b", "main", RESOURCE, 2)

    assert (caught.value.requested, caught.value.available) == (2, 1)
    assert caught.value.code is None
    assert kubelet.allocations == [first]


async def test_unhealthy_devices_are_not_allocated(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(2, unhealthy=["w0", "w1"]))
    await register(kubelet, plugin)

    with pytest.raises(InsufficientDevicesError, match="only 0 healthy"):
        await kubelet.allocate("pod-a", "main", RESOURCE, 1)


@pytest.mark.parametrize(
    ("method", "options"),
    [
        pytest.param("Allocate", PluginOptions(), id="allocate"),
        pytest.param("GetPreferredAllocation", PREFERRED, id="preferred"),
        pytest.param("PreStartContainer", PRE_START, id="pre-start"),
    ],
)
async def test_plugin_errors_surface_with_their_code(
    kubelet: Kubelet, make_plugin: MakePlugin, method: str, options: PluginOptions
) -> None:
    plugin = await make_plugin(widgets(2), options=options)
    await register(kubelet, plugin)
    plugin.errors[method] = (grpc.StatusCode.RESOURCE_EXHAUSTED, "widget jammed")

    with pytest.raises(PluginCallError) as caught:
        await kubelet.allocate("pod-a", "main", RESOURCE, 1)

    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.method == method
    assert "widget jammed" in str(caught.value)
    assert kubelet.allocations == []
    # Nothing was kept: the same devices can be allocated once the plugin recovers.
    del plugin.errors[method]
    record = await kubelet.allocate("pod-a", "main", RESOURCE, 1)
    assert record.device_ids in {("w0",), ("w1",)}


async def test_repeated_allocate_returns_the_existing_record(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(3))
    await register(kubelet, plugin)
    first = await kubelet.allocate("pod-a", "main", RESOURCE, 2)

    again = await kubelet.allocate("pod-a", "main", RESOURCE, 2)

    assert again is first
    assert len(plugin.allocate_requests) == 1
    with pytest.raises(AllocationConflictError, match="cannot change the request to 3"):
        await kubelet.allocate("pod-a", "main", RESOURCE, 3)


@pytest.mark.parametrize(
    ("resource", "count", "error"),
    [
        pytest.param("example.com/unknown", 1, UnknownResourceError, id="unknown-resource"),
        pytest.param(RESOURCE, 0, KubeletError, id="zero-count"),
        pytest.param(RESOURCE, 9, InsufficientDevicesError, id="more-than-exist"),
    ],
)
async def test_bad_requests(
    kubelet: Kubelet,
    make_plugin: MakePlugin,
    resource: str,
    count: int,
    error: type[KubeletError],
) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)

    with pytest.raises(error):
        await kubelet.allocate("pod-a", "main", resource, count)

    assert plugin.allocate_requests == []


async def test_disconnected_resource_cannot_allocate(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)
    plugin.end_streams()
    await kubelet.wait_for(lambda k: not k.resources[RESOURCE].connected)

    with pytest.raises(ResourceUnavailableError, match="not connected"):
        await kubelet.allocate("pod-a", "main", RESOURCE, 1)


async def test_release_frees_the_pods_devices(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)
    await kubelet.allocate("pod-a", "main", RESOURCE, 1)
    await kubelet.allocate("pod-a", "sidecar", RESOURCE, 1)

    kubelet.release("pod-a")

    assert kubelet.allocations == []
    record = await kubelet.allocate("pod-b", "main", RESOURCE, 2)
    assert record.device_ids == ("w0", "w1")


async def test_concurrent_allocations_never_share_devices(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(4), options=PREFERRED)
    await register(kubelet, plugin)

    records = await asyncio.gather(
        *(kubelet.allocate(f"pod-{i}", "main", RESOURCE, 1) for i in range(4))
    )

    assert sorted(r.device_ids[0] for r in records) == ["w0", "w1", "w2", "w3"]


# -- must-include devices (the kubelet's reusable devices) ----------------------------


async def test_must_include_devices_alone_skip_the_preference(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(4), options=PREFERRED)
    await register(kubelet, plugin)

    record = await kubelet.allocate("pod-a", "main", RESOURCE, 2, must_include=["w3", "w0"])

    assert record.device_ids == ("w3", "w0")
    assert "GetPreferredAllocation" not in plugin.calls
    assert plugin.allocate_requests == [[["w3", "w0"]]]


async def test_the_rest_is_asked_with_the_must_include_list(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    def keep_must(available: list[str], must: list[str], size: int) -> list[str]:
        rest = sorted((d for d in available if d not in must), reverse=True)
        return must + rest[: size - len(must)]

    plugin = await make_plugin(widgets(4), options=PREFERRED, preferred=keep_must)
    await register(kubelet, plugin)

    record = await kubelet.allocate("pod-a", "main", RESOURCE, 2, must_include=["w1"])

    assert plugin.preferred_requests == [(["w0", "w1", "w2", "w3"], ["w1"], 2)]
    assert record.device_ids == ("w1", "w3")


async def test_without_preference_must_include_comes_first(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(4))
    await register(kubelet, plugin)

    record = await kubelet.allocate("pod-a", "main", RESOURCE, 3, must_include=["w2"])

    assert record.device_ids == ("w2", "w0", "w1")


async def test_a_preference_that_drops_a_must_include_device_is_refused(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(4), options=PREFERRED)  # prefers the highest IDs
    await register(kubelet, plugin)

    with pytest.raises(InvalidPluginAnswerError, match="must-include device"):
        await kubelet.allocate("pod-a", "main", RESOURCE, 2, must_include=["w0"])
    assert kubelet.allocations == []


@pytest.mark.parametrize(
    ("must_include", "count", "problem"),
    [
        (["w0", "w1"], 1, "2 must-include device"),
        (["w1", "w1"], 2, "repeated device"),
        (["w9"], 1, "not healthy and free: w9"),
        (["w0"], 1, "not healthy and free: w0"),  # unhealthy
        (["w2"], 1, "not healthy and free: w2"),  # held by pod-a
    ],
)
async def test_must_include_devices_must_be_healthy_free_and_few_enough(
    kubelet: Kubelet,
    make_plugin: MakePlugin,
    must_include: list[str],
    count: int,
    problem: str,
) -> None:
    plugin = await make_plugin(widgets(4, unhealthy=["w0"]))
    await register(kubelet, plugin)
    await kubelet.allocate("pod-a", "main", RESOURCE, 1, must_include=["w2"])

    with pytest.raises(KubeletError, match=problem):
        await kubelet.allocate("pod-b", "main", RESOURCE, count, must_include=must_include)
    assert plugin.allocate_requests == [[["w2"]]]
