"""--node-name (env NODE_NAME, which the chart sets from the downward API's
spec.nodeName): in log lines, on the build info series and in inspect's report."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from accel_plugins.cli.main import COMMON_DESTS, build_parser
from accel_plugins.inspector.command import InspectReport, render_json, render_text
from accel_plugins.kubelet_emulator.model import PluginOptions
from accel_plugins.metrics import new_registry
from accel_plugins.util.logs import fatal, setup_logging

NODE = "gpu-node-7"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(
    ("env", "argv", "expected"),
    [
        pytest.param({}, [], "", id="unset"),
        pytest.param({"NODE_NAME": NODE}, [], NODE, id="chart-env"),
        pytest.param(
            {"NODE_NAME": "a", "ACCEL_PLUGINS_NODE_NAME": "b"}, [], "b", id="our-env-first"
        ),
        pytest.param({"NODE_NAME": "a"}, ["--node-name", "c"], "c", id="flag-beats-env"),
    ],
)
@pytest.mark.parametrize("command", ["generic", "inspect"])
def test_flag_and_env(
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    argv: list[str],
    expected: str,
    command: str,
) -> None:
    for key in ("NODE_NAME", "ACCEL_PLUGINS_NODE_NAME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    line = [command, *(["/x.sock"] if command == "inspect" else []), *argv]
    assert build_parser(line).parse_args(line).node_name == expected


def test_a_backend_option_cannot_take_the_name() -> None:
    assert "node_name" in COMMON_DESTS


@pytest.mark.parametrize(
    ("fmt", "node", "expected"),
    [
        pytest.param("text", NODE, f"INFO    node={NODE} accel_plugins.test: ready", id="text"),
        pytest.param("text", "", "INFO    accel_plugins.test: ready", id="text-unset"),
        pytest.param("text", "odd%(name)s", "node=odd%(name)s accel", id="text-percent-kept"),
    ],
)
@pytest.mark.usefixtures("restore_logging")
def test_text_lines_name_the_node(fmt: str, node: str, expected: str) -> None:
    out = io.StringIO()
    setup_logging(fmt, "info", out, node=node)
    logging.getLogger("accel_plugins.test").info("ready")
    assert expected in out.getvalue()


@pytest.mark.parametrize(
    ("node", "field"),
    [pytest.param(NODE, {"node": NODE}, id="set"), pytest.param("", {}, id="unset")],
)
@pytest.mark.usefixtures("restore_logging")
def test_json_lines_and_fatal_errors_carry_the_node(node: str, field: dict[str, str]) -> None:
    out = io.StringIO()
    setup_logging("json", "info", out, node=node)
    logging.getLogger("accel_plugins.test").info("ready")
    fatal("configuration error", out)
    logged, died = (json.loads(line) for line in out.getvalue().splitlines())
    for entry in (logged, died):
        assert {k: v for k, v in entry.items() if k == "node"} == field
    assert died["level"] == "fatal"


@pytest.mark.parametrize(
    ("node", "label"),
    [pytest.param(NODE, NODE, id="set"), pytest.param("", "", id="unset")],
)
def test_build_info_is_labelled_with_the_node(node: str, label: str) -> None:
    text = generate_latest(new_registry(dict, node)).decode()
    (info,) = [line for line in text.splitlines() if line.startswith("accel_plugins_build_info{")]
    assert f'node_name="{label}"' in info


@pytest.mark.parametrize(
    ("node", "first_line", "in_json"),
    [
        pytest.param(NODE, f"node: {NODE}", NODE, id="set"),
        pytest.param("", "plugin socket: /p.sock", None, id="unset"),
    ],
)
def test_inspect_says_which_node(node: str, first_line: str, in_json: str | None) -> None:
    report = InspectReport(Path("/p.sock"), PluginOptions(), (), node=node)
    assert render_text(report).splitlines()[0] == first_line
    assert json.loads(render_json(report))["node"] == in_json
