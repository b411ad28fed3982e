"""``inspect`` shows why devices are Unhealthy, read from the plugin's own /metrics.

ListAndWatch (deviceplugin v1beta1 api.proto, message Device: ID, health, topology)
has no field for a reason, so the reason comes from a real scrape of the plugin's
``accel_plugins_device_health_reason`` series; a plugin without them is still inspected.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry

from accel_plugins.backends.nvidia.xid import xid_reason
from accel_plugins.inspector.command import inspect_plugin, render_json, render_text
from accel_plugins.inspector.reasons import metrics_url, resource_of
from accel_plugins.kubelet_emulator import DeviceState, Kubelet
from accel_plugins.metrics import MetricsServer
from accel_plugins.plugin.device import Device, Health, tree
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from accel_plugins.runtime.server import socket_name
from tests.fixtures.framework import ScriptedBackend
from tests.fixtures.kubelet import MakePlugin
from tests.support.cli import run_cli_async
from tests.support.metrics import MetricsNode

WIDGET = "example.com/widget"
GADGET = "example.com/gadget"
GONE = HealthReason(ReasonKind.NODE_VANISHED, "/dev/w1 is gone")


def address(node: MetricsNode) -> tuple[str, int]:
    parts = urlsplit(node.url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def backend() -> ScriptedBackend:
    return ScriptedBackend(
        tree(
            {
                WIDGET: [
                    Device("w0"),
                    Device("w1").with_health(Health.UNHEALTHY, GONE),
                    Device("w2", Health.UNHEALTHY),
                ],
                # The same ID on another resource: only the socket's resource counts.
                GADGET: [Device("w0").with_health(Health.UNHEALTHY, xid_reason(79))],
            }
        )
    )


async def test_inspect_prints_each_unhealthy_devices_reason(kubelet: Kubelet) -> None:
    scripted = backend()
    async with MetricsNode(lambda: scripted, kubelet.plugin_dir) as node:
        await kubelet.wait_for_resource(WIDGET, allocatable=1)
        socket = kubelet.plugin_dir / socket_name(WIDGET)
        report = await inspect_plugin(socket, metrics=address(node))
        lines = render_text(report).splitlines()
        assert lines[-4:] == [
            "  ID  HEALTH     NUMA  REASON",
            "  w0  Healthy    -     -",
            "  w1  Unhealthy  -     node-vanished",
            "  w2  Unhealthy  -     other",
        ]
        as_json = json.loads(render_json(report))
        assert [d["reason"] for d in as_json["devices"]] == [None, "node-vanished", "other"]
        assert as_json["reasons"] == {"url": f"{node.url}/metrics", "error": None}

        gadget = kubelet.plugin_dir / socket_name(GADGET)
        code, out, err = await run_cli_async(
            "inspect", str(gadget), "--metrics-address", f"{address(node)[0]}:{address(node)[1]}"
        )
        assert code == 0, err
        assert out.splitlines()[-1] == "  w0  Unhealthy  -     xid 79"


async def test_a_plugin_without_reasons_is_still_inspected(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin([DeviceState("w0"), DeviceState("w1", "Unhealthy")])
    # A /metrics without our series (another vendor's exporter): no reasons, nothing else lost.
    other = MetricsServer(CollectorRegistry(auto_describe=False), lambda: _no_problems())
    host, port = await other.start("127.0.0.1", 0)
    try:
        text = render_text(await inspect_plugin(plugin.socket_path, metrics=(host, port)))
    finally:
        await other.stop()
    assert text.splitlines()[-3:] == [
        "  w0  Healthy    -     -",
        "  w1  Unhealthy  -     -",
        f"reasons: unavailable from http://{host}:{port}/metrics: no "
        "accel_plugins_device_health_reason series there (not an accel-plugins plugin?)",
    ]


async def _no_problems() -> list[str]:
    return []


async def test_nobody_on_the_metrics_address(make_plugin: MakePlugin, unused_port: int) -> None:
    plugin = await make_plugin([DeviceState("w0")])
    report = await inspect_plugin(plugin.socket_path, metrics=("127.0.0.1", unused_port))
    assert report.reasons is not None
    assert "refused" in report.reasons.problem.lower()


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        pytest.param(("", 9478), "http://127.0.0.1:9478/metrics", id="all-interfaces"),
        pytest.param(("0.0.0.0", 9478), "http://127.0.0.1:9478/metrics", id="any-ipv4"),
        pytest.param(("::", 9478), "http://[::1]:9478/metrics", id="any-ipv6"),
        pytest.param(("10.0.0.5", 80), "http://10.0.0.5:80/metrics", id="one-address"),
    ],
)
def test_metrics_url(listen: tuple[str, int], url: str) -> None:
    assert metrics_url(listen) == url


@pytest.mark.parametrize(
    ("socket", "resource"),
    [
        pytest.param("example.com_widget.sock", WIDGET, id="ours"),
        pytest.param("test-example.com_widget.sock", WIDGET, id="with-a-prefix"),
        pytest.param("nvidia-gpu.sock", None, id="another-vendors"),
    ],
)
def test_resource_of(socket: str, resource: str | None) -> None:
    assert resource_of(Path(socket), {WIDGET, GADGET}) == resource
