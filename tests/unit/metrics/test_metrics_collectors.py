"""Scrape-time collectors without sockets: device series, attribution, backend series."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from accel_plugins.backends.nvidia.xid import xid_reason
from accel_plugins.metrics import (
    BackendCollector,
    DeviceCollector,
    HealthReasonCollector,
    NoAttribution,
    render,
)
from accel_plugins.plugin.backend import Holders, PodRef
from accel_plugins.plugin.device import Device, DeviceTree, Health
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from tests.support.metrics import parse, promtool_check, series

WIDGET = "example.com/widget"
GADGET = "example.com/gadget"


class Pods:
    """Attribution whose holder maps the test replaces whole, as PodResourcesCache does."""

    def __init__(self) -> None:
        self.available = True
        self.maps: dict[str, Mapping[str, Sequence[PodRef]]] = {}

    def holders(self, resource: str, device_id: str) -> Sequence[PodRef]:
        return self.maps.get(resource, {}).get(device_id, ())

    def holders_of(self, resource: str) -> Mapping[str, Sequence[PodRef]]:
        return self.maps.get(resource, {})


def registry_of(tree: DeviceTree, pods: Pods) -> tuple[CollectorRegistry, dict[str, DeviceTree]]:
    holder = {"tree": tree}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeviceCollector(lambda: holder["tree"], pods))
    return registry, holder


def rows(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    return {
        (dict(k)["device"], dict(k)["pod"], dict(k)["container"]): v
        for k, v in series(parse(render(registry).decode()), "accel_plugins_device_healthy").items()
    }


def test_device_series_follow_devices_and_holders() -> None:
    pods = Pods()
    tree: DeviceTree = {WIDGET: {"w0": Device("w0"), "w1": Device("w1", Health.UNHEALTHY)}}
    registry, holder = registry_of(tree, pods)
    assert rows(registry) == {("w0", "", ""): 1, ("w1", "", ""): 0}

    pods.maps = {WIDGET: {"w0": (PodRef("ns", "a", "init"), PodRef("ns", "a", "main"))}}
    assert rows(registry) == {("w0", "a", "init"): 1, ("w0", "a", "main"): 1, ("w1", "", ""): 0}

    holder["tree"] = {GADGET: {"g0": Device("g0")}}  # the widget resource went away
    assert rows(registry) == {("g0", "", ""): 1}


def test_device_series_render_as_generate_latest_does() -> None:
    pods = Pods()
    pods.maps = {WIDGET: {"w1": (PodRef("team-a", "trainer-0", "main"),)}}
    tree: DeviceTree = {
        WIDGET: {
            f"w{i}": Device(f"w{i}", Health.UNHEALTHY if i == 3 else Health.HEALTHY)
            for i in range(5)
        },
        GADGET: {"g0": Device("g0"), 'odd "id" \\ here': Device('odd "id" \\ here')},
    }
    registry, _ = registry_of(tree, pods)
    render(registry)  # fills the cache: the second render writes from it
    assert render(registry) == generate_latest(registry)


@pytest.mark.parametrize(
    ("available", "value"),
    [pytest.param(True, 1, id="answering"), pytest.param(False, 0, id="no-socket")],
)
def test_attribution_gauge(available: bool, value: int) -> None:
    pods = Pods()
    pods.available = available
    registry, _ = registry_of({}, pods)
    values = parse(render(registry).decode())
    assert series(values, "accel_plugins_pod_attribution_available") == {(): value}


def test_no_attribution_is_unavailable() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeviceCollector(lambda: {WIDGET: {"w0": Device("w0")}}, NoAttribution()))
    values = parse(render(registry).decode())
    assert series(values, "accel_plugins_pod_attribution_available") == {(): 0}


class Provider:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.asked: list[Holders] = []

    async def run(self, publish: object) -> None:  # pragma: no cover - never run here
        pass

    def collect_metrics(self, holders: Holders) -> Iterable[Metric]:
        self.asked.append(holders)
        if self.fail:
            raise RuntimeError("sensor bus on fire")
        family = GaugeMetricFamily("accel_plugins_test_widget_temperature_celsius", "Heat.")
        family.add_metric([], 40)
        return [family]


@pytest.mark.parametrize(
    ("fail", "expected"),
    [
        pytest.param(False, {(): 40}, id="contributes"),
        pytest.param(True, {}, id="fails-alone"),
    ],
)
def test_backend_series_and_failures(
    fail: bool, expected: dict[tuple[()], float], caplog: pytest.LogCaptureFixture
) -> None:
    provider = Provider(fail)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeviceCollector(lambda: {WIDGET: {"w0": Device("w0")}}, NoAttribution()))
    registry.register(BackendCollector(lambda: provider, NoAttribution()))
    values = parse(render(registry).decode())
    assert series(values, "accel_plugins_test_widget_temperature_celsius") == expected
    assert len(series(values, "accel_plugins_device_healthy")) == 1  # the scrape still works
    assert ("backend metrics failed" in caplog.text) == fail
    assert provider.asked[0]("example.com/widget", "w0") == ()


def test_a_backend_without_metrics_adds_nothing() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BackendCollector(lambda: object(), NoAttribution()))
    assert render(registry) == b""


# -- health reasons ---------------------------------------------------------------------


def reason_rows(tree: DeviceTree) -> dict[tuple[str, str, str, str], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthReasonCollector(lambda: tree))
    text = render(registry).decode()
    promtool_check(text)
    return {
        (d["resource"], d["device"], d["kind"], d["code"]): v
        for k, v in series(parse(text), "accel_plugins_device_health_reason").items()
        for d in [dict(k)]
    }


@pytest.mark.parametrize(
    ("device", "row"),
    [
        pytest.param(Device("w0"), None, id="healthy-has-no-series"),
        pytest.param(
            Device("w0").with_health(Health.UNHEALTHY, xid_reason(79)),
            (WIDGET, "w0", "xid", "79"),
            id="xid-with-its-code",
        ),
        pytest.param(
            Device("w0").with_health(
                Health.UNHEALTHY, HealthReason(ReasonKind.NODE_VANISHED, "/dev/w0 is gone")
            ),
            (WIDGET, "w0", "node-vanished", ""),
            id="node-vanished-without-code",
        ),
        pytest.param(
            Device("w0", Health.UNHEALTHY), (WIDGET, "w0", "other", ""), id="no-reason-is-other"
        ),
    ],
)
def test_health_reason_series(device: Device, row: tuple[str, str, str, str] | None) -> None:
    assert reason_rows({WIDGET: {"w0": device}}) == ({row: 1} if row else {})
