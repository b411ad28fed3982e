"""``--kubelet-api dra`` on the command line: flags, defaults, refusals, and the
device-plugin path never loading the DRA modules."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from accel_plugins.backends.generic import command as generic_command
from accel_plugins.backends.nvidia import command as nvidia_command
from accel_plugins.cli import main as cli
from accel_plugins.plugin.command import BackendCommand
from tests.unit.cli.test_cli_backends import clean_environ, never_built


@pytest.mark.parametrize(
    ("name", "command", "driver"),
    [
        # NVIDIA's DRA driver (k8s-dra-driver-gpu) is gpu.nvidia.com: its DeviceClass selects it.
        pytest.param("nvidia", nvidia_command.COMMAND, "gpu.nvidia.com", id="nvidia"),
        pytest.param("generic", generic_command.COMMAND, "generic.accel-plugins.io", id="generic"),
        pytest.param(
            "fpga",
            BackendCommand(summary="x", build=never_built),
            "fpga.accel-plugins.io",
            id="third-party-default",
        ),
    ],
)
def test_default_driver_names(name: str, command: BackendCommand, driver: str) -> None:
    assert command.default_dra_driver_name(name) == driver


def test_flags_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NODE_NAME", "KUBECONFIG", "ACCEL_PLUGINS_KUBELET_API"):
        monkeypatch.delenv(var, raising=False)
    args = cli.build_parser(["generic"]).parse_args(["generic"])
    assert args.kubelet_api == "device-plugin"
    assert args.dra_driver_name == "generic.accel-plugins.io"
    assert str(args.kubelet_plugins_dir) == "/var/lib/kubelet/plugins"
    assert str(args.dra_cdi_spec_dir) == "/var/run/cdi"
    assert args.kubeconfig == ""
    monkeypatch.setenv("ACCEL_PLUGINS_KUBELET_API", "dra")
    monkeypatch.setenv("KUBECONFIG", "/etc/kube/config")
    args = cli.build_parser(["generic"]).parse_args(["generic"])
    assert (args.kubelet_api, args.kubeconfig) == ("dra", "/etc/kube/config")


def test_mirrored_constants_match_their_sources() -> None:
    from accel_plugins.dra.driver import DEFAULT_KUBELET_PLUGINS_DIR
    from accel_plugins.plugin.cdi import DEFAULT_SPEC_DIR

    assert cli.DEFAULT_KUBELET_PLUGINS_DIR == DEFAULT_KUBELET_PLUGINS_DIR
    assert cli.DEFAULT_CDI_SPEC_DIR == DEFAULT_SPEC_DIR
    pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")
    from accel_plugins.dra.kube.taints import TaintMode

    assert tuple(mode.value for mode in TaintMode) == cli.DRA_DEVICE_TAINTS
    from accel_plugins.dra.kube.shares import ShareMode

    assert tuple(mode.value for mode in ShareMode) == cli.DRA_SHARED_DEVICES


@pytest.mark.parametrize(
    ("argv", "env", "mode"),
    [
        pytest.param([], None, "auto", id="default"),
        pytest.param(["--dra-shared-devices", "off"], None, "off", id="flag"),
        pytest.param([], "on", "on", id="env-twin"),
    ],
)
def test_shared_devices_flag(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: str | None, mode: str
) -> None:
    monkeypatch.delenv("ACCEL_PLUGINS_DRA_SHARED_DEVICES", raising=False)
    if env is not None:
        monkeypatch.setenv("ACCEL_PLUGINS_DRA_SHARED_DEVICES", env)
    args = cli.build_parser(["generic"]).parse_args(["generic", *argv])
    assert args.dra_shared_devices == mode


@pytest.mark.parametrize(
    ("argv", "env", "mode"),
    [
        pytest.param([], None, "auto", id="default"),
        pytest.param(["--dra-device-taints", "off"], None, "off", id="flag"),
        pytest.param([], "on", "on", id="env-twin"),
        pytest.param(["--dra-device-taints", "off"], "on", "off", id="flag-over-env"),
    ],
)
def test_device_taints_flag(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: str | None, mode: str
) -> None:
    monkeypatch.delenv("ACCEL_PLUGINS_DRA_DEVICE_TAINTS", raising=False)
    if env is not None:
        monkeypatch.setenv("ACCEL_PLUGINS_DRA_DEVICE_TAINTS", env)
    args = cli.build_parser(["generic"]).parse_args(["generic", *argv])
    assert args.dra_device_taints == mode


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param([], "--node-name: required with --kubelet-api dra", id="no-node-name"),
        pytest.param(
            ["--node-name", "n1", "--dra-driver-name", "Not_A_Domain"],
            "--dra-driver-name: 'Not_A_Domain': must be a DNS subdomain",
            id="bad-driver-name",
        ),
        pytest.param(
            ["--node-name", "n1", "--pod-uid", "../x"],
            "--pod-uid: '../x': a pod UID has letters, digits, '-'",
            id="pod-uid-not-a-file-name",
        ),
        pytest.param(
            ["--node-name", "n1", "--dra-rolling-update", "on"],
            "--dra-rolling-update: on needs --pod-uid (env POD_UID)",
            id="rolling-update-without-a-pod-uid",
        ),
        pytest.param(
            ["--node-name", "n1", "--kube-api-retry-jitter", "-1"],
            "--kube-api-retry-jitter: a jitter factor is 0 or more, not -1",
            id="negative-jitter",
        ),
    ],
)
def test_dra_mode_refuses_bad_settings_with_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    for var in ("NODE_NAME", "ACCEL_PLUGINS_NODE_NAME", "POD_UID", "ACCEL_PLUGINS_POD_UID"):
        monkeypatch.delenv(var, raising=False)
    code = cli.main(["generic", "--kubelet-api", "dra", "--config", "/nonexistent.yaml", *argv])
    assert code == 2
    assert message in capsys.readouterr().err


def test_device_plugin_mode_never_imports_the_dra_modules() -> None:
    code = textwrap.dedent(
        """
        import sys
        from accel_plugins.cli.main import main
        assert main(["generic", "--config", "/nonexistent.yaml"]) == 2
        print([m for m in sys.modules if m.startswith(("accel_plugins.dra", "lightkube"))])
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_environ(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
