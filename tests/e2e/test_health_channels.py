"""A failing device, seen on every channel: Node Events (real API server) and /metrics
(real HTTP scrape), within 2 s, and both clear when it recovers.

The Events have the shape of the kubelet's own (client-go tools/record/event.go,
makeEvent): in namespace ``default``, involvedObject the Node. The 2 s bound is
the issue's (25): measured from the fault to both channels showing it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.discovery import device_id
from accel_plugins.kube.events import node_events
from accel_plugins.kubelet_emulator import Kubelet
from tests.fixtures.generic import FakeHost
from tests.fixtures.nvidia import simulated_backend
from tests.support.metrics import MetricsNode, promtool_check, series

if TYPE_CHECKING:
    from lightkube import AsyncClient

BOUND = 2.0  # seconds, the issue's
DEADLINE = 20.0  # how long a wait may take before the test gives up (not the bound)
REASON = "accel_plugins_device_health_reason"


async def node_events_of(kube: AsyncClient, node: str) -> list[tuple[str, str, str]]:
    from lightkube.resources.core_v1 import Event

    found = []
    async for event in kube.list(Event, namespace="default", fields={"involvedObject.name": node}):
        found.append((event.reason or "", event.type or "", event.message or ""))
    return found


async def first_event(
    kube: AsyncClient, node: str, reason: str
) -> tuple[tuple[str, str, str], float]:
    """The first Event on ``node`` with ``reason``, awaited on a watch: (it, seconds taken).

    A watch without a resource version starts with every Event there already.
    """
    from lightkube.resources.core_v1 import Event

    start = time.monotonic()
    async with asyncio.timeout(DEADLINE):
        async for _, event in kube.watch(
            Event, namespace="default", fields={"involvedObject.name": node}
        ):
            if event.reason == reason:
                found = (event.reason, event.type or "", event.message or "")
                return found, time.monotonic() - start
    raise AssertionError("the watch ended")


async def reasons(node: MetricsNode) -> dict[tuple[str, str, str], float]:
    return {
        (d["device"], d["kind"], d["code"]): v
        for labels, v in series(await node.scrape(), REASON).items()
        for d in [dict(labels)]
    }


async def test_an_xid_shows_on_the_node_and_on_metrics_and_clears_on_recovery(
    kubelet: Kubelet, kube: AsyncClient, kube_node: str
) -> None:
    backend, nvml = simulated_backend("pcie-4gpu", recovery=0.5)
    gpu = nvml.profile.gpus[1].uuid
    async with MetricsNode(lambda: backend, kubelet.plugin_dir) as node:
        await kubelet.wait_for_resource("nvidia.com/gpu", allocatable=4)
        async with node_events(node.manager.health, kube_node, client=kube) as sink:
            assert sink is not None
            assert backend.monitor is not None
            await asyncio.wait_for(backend.monitor.ready.wait(), DEADLINE)
            start = time.monotonic()
            nvml.inject_xid(1, 79)

            event, _ = await first_event(kube, kube_node, "DeviceUnhealthy")
            assert await reasons(node) == {(gpu, "xid", "79"): 1}
            assert time.monotonic() - start <= BOUND
            assert event == (
                "DeviceUnhealthy",
                "Warning",
                f"nvidia.com/gpu device {gpu} is Unhealthy: xid 79: GPU has fallen off the bus",
            )

            back, _ = await first_event(kube, kube_node, "DeviceHealthy")
            assert back == (
                "DeviceHealthy",
                "Normal",
                f"nvidia.com/gpu device {gpu} is Healthy again",
            )
            assert await reasons(node) == {}
            promtool_check((await node.get("/metrics"))[1])


async def test_the_event_names_the_node_by_its_uid(kube: AsyncClient, kube_node: str) -> None:
    from lightkube.resources.core_v1 import Event, Node

    from accel_plugins.kube.events import KubeEventPoster
    from accel_plugins.runtime.node_events import NodeEvent

    await KubeEventPoster(kube, kube_node).post(NodeEvent("DeviceHealthy", "Normal", "m"))
    node = await kube.get(Node, kube_node)
    (event,) = [
        e
        async for e in kube.list(
            Event, namespace="default", fields={"involvedObject.name": kube_node}
        )
    ]
    ref = event.involvedObject
    assert node.metadata is not None
    assert (ref.kind, ref.name, ref.uid) == ("Node", kube_node, node.metadata.uid)
    assert event.source is not None
    assert (event.source.component, event.source.host, event.count) == (
        "accel-plugins",
        kube_node,
        1,
    )


SERIAL = "accel-plugins.io/serial"
CONFIG = "devices: [{name: serial, groups: [{paths: [{path: /dev/ttyUSB*}]}]}]"


async def test_a_vanished_node_shows_on_the_node_and_on_metrics_and_clears_when_back(
    kubelet: Kubelet, fake_host: FakeHost, kube: AsyncClient, kube_node: str
) -> None:
    config = parse_config(CONFIG, "health.yaml")
    fake_host.node("/dev/ttyUSB0")
    fake_host.node("/dev/ttyUSB1")
    tty1 = device_id(0, ["/dev/ttyUSB1"])

    def factory() -> GenericBackend:
        return GenericBackend(config, fake_host.settings())

    async with MetricsNode(factory, kubelet.plugin_dir) as node:
        await kubelet.wait_for_resource(SERIAL, allocatable=2)
        async with node_events(node.manager.health, kube_node, client=kube):
            start = time.monotonic()
            fake_host.remove("/dev/ttyUSB1")

            event, _ = await first_event(kube, kube_node, "DeviceUnhealthy")
            assert await reasons(node) == {(tty1, "node-vanished", ""): 1}
            assert time.monotonic() - start <= BOUND
            assert event[2] == (
                f"{SERIAL} device {tty1} is Unhealthy: node-vanished: /dev/ttyUSB1 no longer found"
            )

            fake_host.node("/dev/ttyUSB1")

            await first_event(kube, kube_node, "DeviceHealthy")
            assert await reasons(node) == {}


async def test_events_are_rate_limited_per_node(kube: AsyncClient, kube_node: str) -> None:
    from accel_plugins.plugin.device import Device, Health, tree
    from accel_plugins.runtime.health_changes import HealthWatch

    watch = HealthWatch()
    async with node_events(watch, kube_node, client=kube, per_minute=3) as sink:
        assert sink is not None
        watch.observe(tree({SERIAL: [Device(f"d{i}") for i in range(5)]}))
        watch.observe(tree({SERIAL: [Device(f"d{i}", Health.UNHEALTHY) for i in range(5)]}))
        await sink.idle()
        assert sink.dropped == 2
    assert len(await node_events_of(kube, kube_node)) == 3


async def test_dra_mode_posts_the_same_events(
    start_driver: Any, kube: AsyncClient, kube_node: str
) -> None:
    from accel_plugins.plugin.device import Device, Health, tree
    from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
    from tests.fixtures.dra_plugin import FakeClaims
    from tests.fixtures.framework import ScriptedBackend

    gone = HealthReason(ReasonKind.NODE_VANISHED, "/dev/card1 is gone")
    scripted = ScriptedBackend(tree({SERIAL: [Device("card0"), Device("card1")]}))
    running = await start_driver(scripted, FakeClaims())
    async with node_events(running.driver.health, kube_node, client=kube):
        scripted.set(
            tree({SERIAL: [Device("card0"), Device("card1").with_health(Health.UNHEALTHY, gone)]})
        )
        event, _ = await first_event(kube, kube_node, "DeviceUnhealthy")
        assert event[2] == f"{SERIAL} device card1 is Unhealthy: node-vanished: /dev/card1 is gone"
        scripted.set(tree({SERIAL: [Device("card0"), Device("card1")]}))
        await first_event(kube, kube_node, "DeviceHealthy")
