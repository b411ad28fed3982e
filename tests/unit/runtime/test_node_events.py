"""Node Events from health changes: their text, and when none can be posted (one log line)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.xid import xid_reason
from accel_plugins.kube.events import node_events
from accel_plugins.runtime.health_changes import HealthChange, HealthWatch
from accel_plugins.runtime.node_events import NodeEvent, node_event

R = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("change", "event"),
    [
        pytest.param(
            HealthChange(R, "GPU-1", False, xid_reason(48)),
            NodeEvent(
                "DeviceUnhealthy",
                "Warning",
                "nvidia.com/gpu device GPU-1 is Unhealthy: xid 48: Double Bit ECC Error",
            ),
            id="unhealthy-with-reason",
        ),
        pytest.param(
            HealthChange(R, "GPU-1", False, None),
            NodeEvent(
                "DeviceUnhealthy",
                "Warning",
                "nvidia.com/gpu device GPU-1 is Unhealthy: no reason given",
            ),
            id="unhealthy-without-reason",
        ),
        pytest.param(
            HealthChange(R, "GPU-1", True, None),
            NodeEvent("DeviceHealthy", "Normal", "nvidia.com/gpu device GPU-1 is Healthy again"),
            id="recovered",
        ),
    ],
)
def test_node_event(change: HealthChange, event: NodeEvent) -> None:
    assert node_event(change) == event


async def test_no_node_name_means_no_events_and_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "accel_plugins.kube.events")
    async with node_events(HealthWatch(), "") as sink:
        assert sink is None
    assert [r.getMessage() for r in caplog.records] == [
        "no Node Events for device health: --node-name is not set"
    ]


async def test_without_lightkube_the_plugin_runs_on_without_events(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, "accel_plugins.kube.events")
    monkeypatch.setitem(sys.modules, "lightkube", None)  # import fails as when not installed
    monkeypatch.delitem(sys.modules, "accel_plugins.kube.client", raising=False)
    async with node_events(HealthWatch(), "node-a") as sink:
        assert sink is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "lightkube is not installed" in line


async def test_without_api_access_the_plugin_runs_on_without_events(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, "accel_plugins.kube.events")
    pytest.importorskip("lightkube")
    missing = tmp_path / "no-such-kubeconfig"
    async with node_events(HealthWatch(), "node-a", kubeconfig=str(missing)) as sink:
        assert sink is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("no Node Events for device health: no API access")
