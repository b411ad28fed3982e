"""``inspect --allocate N --pre-start``: PreStartContainer on the dry run's devices, called
only when the plugin requires it, its outcome reported (text, JSON, exit status)."""

from __future__ import annotations

import json

import grpc
import pytest

from accel_plugins.inspector.command import InspectError, inspect_plugin, render_text
from accel_plugins.kubelet_emulator import PluginOptions
from tests.fixtures.kubelet import MakePlugin, widgets
from tests.support.cli import run_cli_async

REQUIRED = PluginOptions(pre_start_required=True)

CASES = {
    # options, PreStartContainer error to answer, called, error, text line
    "required and ok": (REQUIRED, None, True, None, "PreStartContainer(w0, w1): ok"),
    "required and failing": (
        REQUIRED,
        (grpc.StatusCode.FAILED_PRECONDITION, "firmware\nnot loaded"),
        True,
        "FAILED_PRECONDITION: firmware not loaded",
        "PreStartContainer(w0, w1): failed: FAILED_PRECONDITION: firmware not loaded",
    ),
    "not required": (
        PluginOptions(),
        None,
        False,
        None,
        "PreStartContainer: not called (the plugin does not require it)",
    ),
}


@pytest.mark.parametrize(
    ("options", "failure", "called", "error", "line"), CASES.values(), ids=CASES
)
async def test_pre_start(
    make_plugin: MakePlugin,
    options: PluginOptions,
    failure: tuple[grpc.StatusCode, str] | None,
    called: bool,
    error: str | None,
    line: str,
) -> None:
    plugin = await make_plugin(widgets(3), options=options)
    if failure is not None:
        plugin.errors["PreStartContainer"] = failure

    report = await inspect_plugin(plugin.socket_path, allocate=2, pre_start=True)

    assert report.dry_run is not None
    assert report.dry_run.pre_start is not None
    assert (report.dry_run.pre_start.called, report.dry_run.pre_start.error) == (called, error)
    assert report.pre_start_failed == (error is not None)
    assert plugin.calls.count("PreStartContainer") == int(called)
    if called:
        assert plugin.calls.index("Allocate") < plugin.calls.index("PreStartContainer")
    if called and error is None:
        assert plugin.pre_start_requests == [["w0", "w1"]]  # the stub records answered calls
    assert render_text(report).splitlines()[-1] == line


async def test_without_pre_start_it_is_never_called(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(3), options=REQUIRED)

    report = await inspect_plugin(plugin.socket_path, allocate=1)

    assert report.dry_run is not None
    assert report.dry_run.pre_start is None
    assert "PreStartContainer" not in plugin.calls


async def test_pre_start_needs_a_dry_run(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(1), options=REQUIRED)

    with pytest.raises(InspectError, match="--pre-start needs --allocate N"):
        await inspect_plugin(plugin.socket_path, pre_start=True)


async def _cli(*args: str) -> tuple[int, str, str]:
    return await run_cli_async("inspect", *args)


@pytest.mark.parametrize(("failing", "code"), [(False, 0), (True, 1)], ids=["ok", "failing"])
async def test_cli_exit_status_and_json(make_plugin: MakePlugin, failing: bool, code: int) -> None:
    plugin = await make_plugin(widgets(2), options=REQUIRED)
    if failing:
        plugin.errors["PreStartContainer"] = (grpc.StatusCode.UNAVAILABLE, "busy")

    status, out, err = await _cli(
        str(plugin.socket_path), "--allocate", "1", "--pre-start", "--json"
    )

    assert status == code, err
    assert json.loads(out)["dry_run"]["pre_start"] == {
        "called": True,
        "ok": not failing,
        "error": "UNAVAILABLE: busy" if failing else None,
    }
