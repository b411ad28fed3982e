"""/metrics and /healthz over real HTTP, following the manager's state."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import AsyncIterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from accel_plugins.errors import ConfigError
from accel_plugins.kubelet import Kubelet
from accel_plugins.metrics import MetricsServer, new_registry, parse_address
from accel_plugins.plugin.device import Device, Health, tree
from tests.framework_fixtures import RunningManager, ScriptedBackend, StartManager

WIDGET = "example.com/widget"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
async def metrics_url(
    kubelet: Kubelet, start_manager: StartManager
) -> AsyncIterator[tuple[str, RunningManager, ScriptedBackend]]:
    devices = [Device("w0"), Device("w1"), Device("w2", Health.UNHEALTHY)]
    backend = ScriptedBackend(tree({WIDGET: devices}))
    running = await start_manager(backend)
    server = MetricsServer(new_registry(running.manager.status), running.manager.status)
    host, port = await server.start("127.0.0.1", 0)
    yield f"http://{host}:{port}", running, backend
    await server.stop()


async def test_scrape_reports_devices_and_registration(
    kubelet: Kubelet, metrics_url: tuple[str, RunningManager, ScriptedBackend]
) -> None:
    url, _, backend = metrics_url
    await kubelet.wait_for_resource(WIDGET, allocatable=2)
    await kubelet.wait_for(lambda k: k.resources[WIDGET].connected)
    status, text = await asyncio.to_thread(get, f"{url}/metrics")
    assert status == 200
    values = samples(text)
    res = ("resource", WIDGET)
    assert values[("accel_plugins_devices", (("health", "Healthy"), res))] == 2
    assert values[("accel_plugins_devices", (("health", "Unhealthy"), res))] == 1
    assert values[("accel_plugins_resource_registered", (res,))] == 1
    assert values[("accel_plugins_registrations_total", (res,))] == 1
    assert values[("accel_plugins_list_and_watch_streams", (res,))] == 1

    backend.set(tree({WIDGET: [Device("w0")]}))
    await kubelet.wait_for_resource(WIDGET, allocatable=1)
    _, text = await asyncio.to_thread(get, f"{url}/metrics")
    assert samples(text)[("accel_plugins_devices", (("health", "Unhealthy"), res))] == 0


async def test_healthz_follows_the_kubelet(
    kubelet: Kubelet, metrics_url: tuple[str, RunningManager, ScriptedBackend]
) -> None:
    url, running, _ = metrics_url
    await kubelet.wait_for_resource(WIDGET)
    await kubelet.wait_for(lambda k: running.manager.status()[WIDGET].registered)
    assert (await asyncio.to_thread(get, f"{url}/healthz"))[0] == 200

    await kubelet.stop()  # the kubelet goes away, and its socket with it
    assert not kubelet.socket_path.exists()
    status, body = await asyncio.to_thread(get, f"{url}/healthz")
    assert (status, body) == (503, "not registered\n")

    await kubelet.start()
    await kubelet.wait_for(lambda k: running.manager.status()[WIDGET].registered)
    assert (await asyncio.to_thread(get, f"{url}/healthz"))[0] == 200


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", None, id="empty-disables"),
        pytest.param(":9478", ("0.0.0.0", 9478), id="all-interfaces"),
        pytest.param("127.0.0.1:80", ("127.0.0.1", 80), id="host-port"),
        pytest.param("[::1]:9000", ("::1", 9000), id="ipv6"),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("9478", id="no-colon"),
        pytest.param(":0x", id="bad-port"),
        pytest.param(":70000", id="port-range"),
    ],
)
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="--metrics-address"):
        parse_address(text)
