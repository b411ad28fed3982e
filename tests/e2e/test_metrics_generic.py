"""The generic plugin's /metrics over real HTTP, against the kubelet emulator.

Device nodes are made with mknod under a fake host /dev (the tests skip
without CAP_MKNOD); pods come from the emulator's PodResources v1 server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.discovery import device_id
from accel_plugins.kubelet_emulator import Kubelet
from tests.fixtures.generic import FakeHost
from tests.support.metrics import MetricsNode, Samples, promtool_check, series

SERIAL = "accel-plugins.io/serial"
CONFIG = "devices: [{name: serial, groups: [{paths: [{path: /dev/ttyUSB*}]}]}]"
TTY0 = device_id(0, ["/dev/ttyUSB0"])
TTY1 = device_id(0, ["/dev/ttyUSB1"])
NOBODY = (("container", ""), ("namespace", ""), ("pod", ""))


def generic(host: FakeHost) -> Callable[[], GenericBackend]:
    config = parse_config(CONFIG, "metrics.yaml")
    return lambda: GenericBackend(config, host.settings())


def device_health(values: Samples) -> dict[tuple[str, str, str], float]:
    """device -> value, keyed with the pod that holds it ("" when none)."""
    out = {}
    for labels, value in series(values, "accel_plugins_device_healthy").items():
        found = dict(labels)
        assert found["resource"] == SERIAL
        out[(found["device"], found["namespace"], found["pod"])] = value
    return out


async def test_device_gauges_follow_hotplug_health_and_allocations(
    kubelet: Kubelet, fake_host: FakeHost
) -> None:
    fake_host.node("/dev/ttyUSB0")
    async with MetricsNode(generic(fake_host), kubelet.plugin_dir) as node:
        await kubelet.wait_for_resource(SERIAL, allocatable=1)
        assert device_health(await node.scrape()) == {(TTY0, "", ""): 1}

        fake_host.node("/dev/ttyUSB1")  # plugged in
        await kubelet.wait_for_resource(SERIAL, allocatable=2)
        assert device_health(await node.scrape()) == {(TTY0, "", ""): 1, (TTY1, "", ""): 1}

        fake_host.remove("/dev/ttyUSB1")  # unplugged: Unhealthy until nobody could hold it
        await kubelet.wait_for(lambda k: k.resources[SERIAL].unhealthy == [TTY1])
        values = await node.scrape()
        assert device_health(values) == {(TTY0, "", ""): 1, (TTY1, "", ""): 0}
        res = ("resource", SERIAL)
        assert series(values, "accel_plugins_devices") == {
            (("health", "Healthy"), res): 1,
            (("health", "Unhealthy"), res): 1,
        }

        await kubelet.allocate("pod", "main", SERIAL, 1)
        values = await node.scrape()
        assert series(values, "accel_plugins_allocations_total") == {(res,): 1}
        assert series(values, "accel_plugins_allocated_devices_total") == {(res,): 1}

        fake_host.node("/dev/ttyUSB1")  # back: Healthy again
        await kubelet.wait_for_resource(SERIAL, allocatable=2)
        values = await node.scrape()
        assert device_health(values) == {(TTY0, "", ""): 1, (TTY1, "", ""): 1}
        promtool_check((await node.get("/metrics"))[1])


async def test_device_series_name_the_pod_holding_them(
    kubelet: Kubelet, fake_host: FakeHost
) -> None:
    fake_host.node("/dev/ttyUSB0")
    fake_host.node("/dev/ttyUSB1")
    socket = kubelet.pod_resources_socket
    async with MetricsNode(
        generic(fake_host), kubelet.plugin_dir, pod_resources_socket=socket
    ) as node:
        await kubelet.wait_for_resource(SERIAL, allocatable=2)
        record = await kubelet.allocate("web", "main", SERIAL, 1, namespace="shop")
        (held,) = record.device_ids
        free = TTY1 if held == TTY0 else TTY0

        await node.attribution()
        values = await node.scrape()
        assert series(values, "accel_plugins_pod_attribution_available") == {(): 1}
        assert device_health(values) == {(held, "shop", "web"): 1, (free, "", ""): 1}
        ((labels, _),) = [
            (labels, v)
            for labels, v in series(values, "accel_plugins_device_healthy").items()
            if ("device", held) in labels
        ]
        assert ("container", "main") in labels

        kubelet.release("web", namespace="shop")
        await node.attribution()
        assert device_health(await node.scrape()) == {(held, "", ""): 1, (free, "", ""): 1}


async def test_without_the_pod_resources_socket_attribution_is_unavailable(
    kubelet: Kubelet, fake_host: FakeHost, tmp_path: Path
) -> None:
    fake_host.node("/dev/ttyUSB0")
    absent = tmp_path / "pod-resources" / "kubelet.sock"
    async with MetricsNode(
        generic(fake_host), kubelet.plugin_dir, pod_resources_socket=absent
    ) as node:
        await kubelet.wait_for_resource(SERIAL, allocatable=1)
        await kubelet.allocate("web", "main", SERIAL, 1)
        await node.attribution()
        values = await node.scrape()
    assert series(values, "accel_plugins_pod_attribution_available") == {(): 0}
    assert set(series(values, "accel_plugins_device_healthy")) == {
        (*NOBODY[:1], ("device", TTY0), *NOBODY[1:], ("resource", SERIAL))
    }
