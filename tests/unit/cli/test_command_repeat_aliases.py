"""``Option(repeat=True)`` and ``BackendCommand.common_aliases``: what a backend author gets.

A repeated flag is pflag's StringArray (squat's ``--device``): every use adds a
value, in order. Its env twin holds a YAML list; the command line replaces it,
as it wins over the environment for every other flag (accel_plugins/util/flags.py).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from accel_plugins.cli.main import COMMON_DESTS, add_options, build_parser
from accel_plugins.plugin.command import BackendCommand, Option

TAG = Option("--tag", "a tag", default=(), repeat=True)
PORT = Option("--port", "a port", default=(), type=int, repeat=True, env=("VENDOR_PORTS",))


def parse(*argv: str) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_options(parser, (TAG, PORT))
    return vars(parser.parse_args(argv))


REPEAT = [
    pytest.param([], {}, (), (), id="default-empty"),
    pytest.param(["--tag", "a", "--tag", "b"], {}, ("a", "b"), (), id="in-order"),
    pytest.param(["--port", "1", "--port", "2"], {}, (), (1, 2), id="each-converted"),
    pytest.param([], {"ACCEL_PLUGINS_TAG": "[a, b]"}, ("a", "b"), (), id="env-yaml-list"),
    pytest.param([], {"ACCEL_PLUGINS_TAG": '["x"]'}, ("x",), (), id="env-json-list"),
    pytest.param(
        [], {"ACCEL_PLUGINS_TAG": "- {k: v}"}, ('{"k": "v"}',), (), id="env-mapping-as-json"
    ),
    pytest.param(
        ["--tag", "c"], {"ACCEL_PLUGINS_TAG": "[a, b]"}, ("c",), (), id="flag-replaces-env"
    ),
    pytest.param([], {"VENDOR_PORTS": "[7, 8]"}, (), (7, 8), id="vendor-env-list"),
]


@pytest.mark.parametrize(("argv", "env", "tags", "ports"), REPEAT)
def test_a_repeated_option(
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    tags: tuple[str, ...],
    ports: tuple[int, ...],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert parse(*argv) == {"tag": tags, "port": ports}


BAD_ENV = [
    pytest.param("ACCEL_PLUGINS_TAG", "a", "ACCEL_PLUGINS_TAG: expected a YAML list", id="scalar"),
    pytest.param("ACCEL_PLUGINS_TAG", "[a", "ACCEL_PLUGINS_TAG: not a YAML list", id="syntax"),
    pytest.param("ACCEL_PLUGINS_PORT", "[x]", "ACCEL_PLUGINS_PORT='[x]'", id="bad-item"),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD_ENV)
def test_a_bad_env_list_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    value: str,
    message: str,
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as caught:
        parse()
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_a_repeated_options_default_is_a_tuple() -> None:
    with pytest.raises(ValueError, match="default is a tuple"):
        Option("--tag", "a tag", repeat=True)


def _build(_: object) -> Any:
    raise AssertionError("not called")


COMMON_ALIASES = [
    pytest.param({"--plugin-dir": ("plugin_dir",)}, "flags are spelled", id="bad-spelling"),
    pytest.param({"--metrics-address": ("--tag",)}, "spell options of the command", id="clash"),
]


@pytest.mark.parametrize(("aliases", "message"), COMMON_ALIASES)
def test_common_aliases_are_checked(aliases: dict[str, tuple[str, ...]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackendCommand("x", _build, options=(TAG,), common_aliases=aliases)


def test_the_generic_help_shows_squats_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    from accel_plugins.backends.generic.command import COMMAND

    common = {"--" + dest.replace("_", "-") for dest in COMMON_DESTS}
    assert set(COMMAND.common_aliases) <= common
    with pytest.raises(SystemExit):
        build_parser(["generic"]).parse_args(["generic", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--plugin-dir PLUGIN_DIR, --plugin-directory PLUGIN_DIR" in text
    assert "--metrics-address METRICS_ADDRESS, --listen METRICS_ADDRESS" in text
    assert "--device SPEC" in text
