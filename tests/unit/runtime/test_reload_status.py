"""Reload outcomes: the status the manager keeps, its series and its /healthz line."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from accel_plugins.metrics import MetricsServer, ReloadCollector
from accel_plugins.runtime.reload_status import ReloadStatus
from tests.support.metrics import get, parse, series

START = ReloadStatus(last_success=100.0)


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param([], START, id="start-counts-as-loaded"),
        pytest.param(["ok"], ReloadStatus(successes=1, last_success=200.0), id="good-file"),
        pytest.param(
            ["bad"],
            ReloadStatus(failures=1, last_error="c.yaml: devices: bad", last_success=100.0),
            id="bad-file-keeps-last-success",
        ),
        pytest.param(
            ["bad", "ok"],
            ReloadStatus(successes=1, failures=1, last_success=200.0),
            id="fixed-file-clears-the-error",
        ),
    ],
)
def test_status_after_reloads(steps: list[str], expected: ReloadStatus) -> None:
    status = START
    for step in steps:
        status = status.succeeded(200.0) if step == "ok" else status.failed("c.yaml: devices: bad")
    assert status == expected
    assert status.failing == bool(expected.last_error)
    assert bool(status.note()) == status.failing


def test_series_follow_the_status() -> None:
    current = [START.failed("c.yaml: devices: bad")]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReloadCollector(lambda: current[0]))
    values = parse(generate_latest(registry).decode())
    assert series(values, "accel_plugins_config_reloads_total") == {
        (("result", "failure"),): 1,
        (("result", "success"),): 0,
    }
    assert series(values, "accel_plugins_config_last_reload_successful") == {(): 0}
    assert series(values, "accel_plugins_config_last_reload_success_timestamp_seconds") == {
        (): 100.0
    }
    current[0] = current[0].succeeded(300.0)
    values = parse(generate_latest(registry).decode())
    assert series(values, "accel_plugins_config_last_reload_successful") == {(): 1}


@pytest.mark.parametrize(
    ("problems", "notes", "expected"),
    [
        pytest.param([], [], (200, "ok\n"), id="healthy"),
        pytest.param(
            [], ["configuration: bad"], (200, "ok\nconfiguration: bad\n"), id="note-stays-200"
        ),
        pytest.param(
            ["gpu: not serving"],
            ["configuration: bad"],
            (503, "gpu: not serving\nconfiguration: bad\n"),
            id="problem-and-note",
        ),
    ],
)
async def test_healthz_lists_notes_without_failing(
    problems: list[str], notes: list[str], expected: tuple[int, str]
) -> None:
    async def health() -> list[str]:
        return problems

    server = MetricsServer(CollectorRegistry(), health, notes=lambda: notes)
    host, port = await server.start("127.0.0.1", 0)
    try:
        assert await asyncio.to_thread(get, f"http://{host}:{port}/healthz") == expected
    finally:
        await server.stop()
