"""Every flag has an environment twin; the command line wins over it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from accel_plugins.cli.main import build_parser
from accel_plugins.util.flags import add_flag, env_name, parse_bool


@pytest.mark.parametrize(
    ("flag", "env"),
    [
        pytest.param("--plugin-dir", "ACCEL_PLUGINS_PLUGIN_DIR", id="plugin-dir"),
        pytest.param("--kubelet-socket", "ACCEL_PLUGINS_KUBELET_SOCKET", id="kubelet-socket"),
        pytest.param("--log-format", "ACCEL_PLUGINS_LOG_FORMAT", id="log-format"),
    ],
)
def test_env_names(flag: str, env: str) -> None:
    assert env_name(flag) == env


@pytest.mark.parametrize(
    ("env", "argv", "expected"),
    [
        pytest.param({}, [], Path("/var/lib/kubelet/device-plugins"), id="default"),
        pytest.param({"ACCEL_PLUGINS_PLUGIN_DIR": "/env"}, [], Path("/env"), id="env"),
        pytest.param(
            {"ACCEL_PLUGINS_PLUGIN_DIR": "/env"},
            ["--plugin-dir", "/flag"],
            Path("/flag"),
            id="flag-beats-env",
        ),
    ],
)
def test_plugin_dir_precedence(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], argv: list[str], expected: Path
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    args = build_parser(["kubelet", *argv]).parse_args(["kubelet", *argv])
    assert args.plugin_dir == expected


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, None, id="unset: <plugin-dir>/kubelet.sock"),
        pytest.param({"KUBELET_SOCKET": "/k/a.sock"}, Path("/k/a.sock"), id="NVIDIA's name"),
        pytest.param(
            {"KUBELET_SOCKET": "/k/a.sock", "ACCEL_PLUGINS_KUBELET_SOCKET": "/k/b.sock"},
            Path("/k/b.sock"),
            id="ours wins",
        ),
    ],
)
def test_backends_read_nvidias_kubelet_socket_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: Path | None
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for command in ("nvidia", "generic"):
        args = build_parser([command]).parse_args([command])
        assert args.kubelet_socket == expected


@pytest.mark.parametrize("command", ["generic", "nvidia", "kubelet"])
@pytest.mark.parametrize(
    ("argv", "env", "dest"),
    [
        pytest.param(["--plugin-dir", "pd"], {}, "plugin_dir", id="plugin-dir flag"),
        pytest.param([], {"ACCEL_PLUGINS_PLUGIN_DIR": "pd"}, "plugin_dir", id="plugin-dir env"),
        pytest.param(["--kubelet-socket", "pd/k.sock"], {}, "kubelet_socket", id="kubelet-socket"),
        pytest.param(
            ["--pod-resources-socket", "pr.sock"], {}, "pod_resources_socket", id="pod-resources"
        ),
    ],
)
def test_relative_socket_paths_are_made_absolute(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    command: str,
    argv: list[str],
    env: dict[str, str],
    dest: str,
) -> None:
    # gRPC reads unix://pd/x.sock as an authority: a relative plugin dir was never served.
    monkeypatch.chdir(tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    args = build_parser([command, *argv]).parse_args([command, *argv])
    value = getattr(args, dest)
    assert value.is_absolute()
    assert value.parent in (tmp_path, tmp_path / "pd")


def test_bad_env_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ACCEL_PLUGINS_LOG_FORMAT", "xml")
    with pytest.raises(SystemExit) as exited:
        build_parser(["kubelet"])
    assert exited.value.code == 2
    assert "ACCEL_PLUGINS_LOG_FORMAT='xml'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("true", True, id="true"),
        pytest.param("1", True, id="one"),
        pytest.param("Yes", True, id="yes"),
        pytest.param("false", False, id="false"),
        pytest.param("0", False, id="zero"),
        pytest.param("off", False, id="off"),
    ],
)
def test_parse_bool(text: str, value: bool) -> None:
    assert parse_bool(text) is value


def test_parse_bool_rejects_garbage() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected a boolean"):
        parse_bool("maybe")


def test_bool_flag_alone_means_true(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser()
    add_flag(
        parser,
        "--pass-device-specs",
        default=False,
        type=parse_bool,
        help="x",
        env=["PASS_DEVICE_SPECS"],
    )
    assert parser.parse_args(["--pass-device-specs"]).pass_device_specs is True
    assert parser.parse_args(["--pass-device-specs=false"]).pass_device_specs is False
    monkeypatch.setenv("PASS_DEVICE_SPECS", "true")
    parser = argparse.ArgumentParser()
    add_flag(
        parser,
        "--pass-device-specs",
        default=False,
        type=parse_bool,
        help="x",
        env=["PASS_DEVICE_SPECS"],
    )
    assert parser.parse_args([]).pass_device_specs is True


def test_aliases_set_the_same_value_and_the_env_twin_follows_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    add_flag(parser, "--nvidia-driver-root", default="/", help="root", aliases=("--driver-root",))
    assert parser.parse_args(["--driver-root", "/x"]).nvidia_driver_root == "/x"
    monkeypatch.setenv("ACCEL_PLUGINS_NVIDIA_DRIVER_ROOT", "/e")
    parser = argparse.ArgumentParser()
    add_flag(parser, "--nvidia-driver-root", default="/", help="root", aliases=("--driver-root",))
    assert parser.parse_args([]).nvidia_driver_root == "/e"


def test_option_aliases_are_spelled_as_flags() -> None:
    from accel_plugins.plugin.command import Option

    assert Option("--a", "help", aliases=("--b",)).aliases == ("--b",)
    with pytest.raises(ValueError, match="--lower-case-name"):
        Option("--a", "help", aliases=("-b",))
