"""Device and health tracking from ListAndWatch, and what happens when a stream ends."""

from __future__ import annotations

from accel_plugins.kubelet_emulator import DeviceState, Kubelet
from tests.fixtures.kubelet import RESOURCE, MakePlugin, register, widgets


async def test_capacity_counts_all_and_allocatable_only_healthy(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(4, unhealthy=["w2"]))

    await register(kubelet, plugin)

    view = kubelet.resources[RESOURCE]
    assert view.connected
    assert (view.capacity, view.allocatable) == (4, 3)
    assert view.healthy == ["w0", "w1", "w3"]
    assert view.unhealthy == ["w2"]
    assert view.devices["w1"] == DeviceState("w1", "Healthy", (0,))
    assert view.updates == 1


async def test_health_change_reaches_the_kubelet(
    kubelet: Kubelet, make_plugin: MakePlugin, kubelet_events: list[str]
) -> None:
    plugin = await make_plugin(widgets(3))
    await register(kubelet, plugin)

    plugin.set_devices(widgets(3, unhealthy=["w1"]))
    await kubelet.wait_for(lambda k: k.resources[RESOURCE].allocatable == 2)
    assert kubelet.resources[RESOURCE].unhealthy == ["w1"]

    plugin.set_devices(widgets(3))
    await kubelet.wait_for(lambda k: k.resources[RESOURCE].allocatable == 3)
    assert kubelet.resources[RESOURCE].updates == 3
    assert any("health w1=Unhealthy" in line for line in kubelet_events)


async def test_devices_added_and_removed(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)

    plugin.set_devices([DeviceState("w1"), DeviceState("w7", numa_nodes=(1,))])
    await kubelet.wait_for(lambda k: "w7" in k.resources[RESOURCE].devices)

    view = kubelet.resources[RESOURCE]
    assert sorted(view.devices) == ["w1", "w7"]
    assert view.devices["w7"].numa_nodes == (1,)


async def test_plugin_going_away_disconnects_and_zeroes_allocatable(
    kubelet: Kubelet, make_plugin: MakePlugin, kubelet_events: list[str]
) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)

    await plugin.stop()
    await kubelet.wait_for(lambda k: not k.resources[RESOURCE].connected)

    view = kubelet.resources[RESOURCE]
    # The devices stay known (capacity) but none is usable (allocatable).
    assert (view.capacity, view.allocatable) == (2, 0)
    assert any("ListAndWatch stream ended" in line for line in kubelet_events)


async def test_clean_stream_end_also_disconnects(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)

    plugin.end_streams()
    await kubelet.wait_for(lambda k: not k.resources[RESOURCE].connected)

    assert kubelet.resources[RESOURCE].allocatable == 0


async def test_reregistering_after_disconnect_restores_devices(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)
    plugin.end_streams()
    await kubelet.wait_for(lambda k: not k.resources[RESOURCE].connected)

    await register(kubelet, plugin)

    view = kubelet.resources[RESOURCE]
    assert view.connected
    assert view.allocatable == 2


async def test_stop_closes_streams_and_is_idempotent(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(1))
    await register(kubelet, plugin)

    await kubelet.stop()
    await kubelet.stop()

    assert not kubelet.running
    assert not kubelet.resources[RESOURCE].connected


async def test_events_list_a_few_devices_and_count_the_rest(
    kubelet: Kubelet, make_plugin: MakePlugin, kubelet_events: list[str]
) -> None:
    plugin = await make_plugin(widgets(6))

    await register(kubelet, plugin)

    assert f"{RESOURCE}: 6 devices (6 healthy); added w0, w1, w2, w3 and 2 more" in kubelet_events
