"""`accel-plugins generic` flags, env twins and the backend factory (COMMAND.build)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.command import COMMAND
from accel_plugins.backends.generic.factory import settings_from_options
from accel_plugins.backends.generic.monitor import UdevSource
from accel_plugins.cli.main import add_options
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.command import BackendContext, BackendFactory
from tests.fixtures.generic import REPO, WriteConfig
from tests.support.cli import run_cli

GOOD = "devices: [{name: kvm, groups: [{paths: [{path: /dev/kvm}]}]}]\n"


def parse(*argv: str) -> dict[str, Any]:
    """The option values ``accel-plugins generic ARGV`` gives COMMAND.build."""
    parser = argparse.ArgumentParser()
    add_options(parser, COMMAND.options)
    return vars(parser.parse_args(argv))


def build(*argv: str) -> BackendFactory:
    return COMMAND.build(BackendContext(options=parse(*argv)))


def test_defaults() -> None:
    args = parse("--config", "c.yaml")
    assert settings_from_options(args) == GenericSettings(
        domain="accel-plugins.io",
        dev_root=Path("/dev"),
        sys_root=Path("/sys"),
        cdi_spec_dir=None,
        udev_source=UdevSource.AUTO,
        rescan_interval=5.0,
        vanished_grace=300.0,
    )


def test_every_flag_has_an_environment_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "ACCEL_PLUGINS_CONFIG": "/etc/accel/generic.yaml",
        "ACCEL_PLUGINS_DOMAIN": "squat.ai",
        "ACCEL_PLUGINS_DEV_ROOT": "/host/dev",
        "ACCEL_PLUGINS_SYS_ROOT": "/host/sys",
        "ACCEL_PLUGINS_CDI_SPEC_DIR": "/var/run/cdi",
        "ACCEL_PLUGINS_UDEV_SOURCE": "kernel",
        "ACCEL_PLUGINS_RESCAN_INTERVAL": "2.5",
        "ACCEL_PLUGINS_VANISHED_GRACE": "60",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = parse()
    assert args["config"] == "/etc/accel/generic.yaml"
    assert settings_from_options(args) == GenericSettings(
        domain="squat.ai",
        dev_root=Path("/host/dev"),
        sys_root=Path("/host/sys"),
        cdi_spec_dir=Path("/var/run/cdi"),
        udev_source=UdevSource.KERNEL,
        rescan_interval=2.5,
        vanished_grace=60.0,
    )
    # The command line wins over the environment.
    assert settings_from_options(parse("--domain", "example.com")).domain == "example.com"


BAD_FLAGS = [
    pytest.param(
        ["--domain", "Example.COM"],
        "--domain: 'Example.COM' is not a DNS-1123 subdomain",
        id="domain-not-lowercase",
    ),
    pytest.param(
        ["--domain", "kubernetes.io"],
        "--domain: 'kubernetes.io' is reserved for Kubernetes' own resources",
        id="domain-reserved",
    ),
    pytest.param(
        ["--rescan-interval", "0"],
        "--rescan-interval: must be a positive number of seconds, got 0.0",
        id="zero-interval",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD_FLAGS)
def test_bad_flags(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_options(parse("--config", "c.yaml", *argv))
    assert str(caught.value).startswith(message)


def test_config_is_required() -> None:
    with pytest.raises(ConfigError) as caught:
        build()
    assert str(caught.value) == (
        "--config: required unless --device gives the devices (or set ACCEL_PLUGINS_CONFIG)"
    )


def test_a_bad_config_fails_before_any_backend_exists(write_config: WriteConfig) -> None:
    path = write_config("devices: [{name: kvm, groups: [{paths: [{path: kvm}]}]}]\n")
    with pytest.raises(ConfigError) as caught:
        build("--config", str(path))
    assert str(caught.value) == (
        f"{path}: devices[0].groups[0].paths[0].path: 'kvm' is not an absolute path"
    )


def test_the_factory_rereads_the_file_on_each_call(write_config: WriteConfig) -> None:
    path = write_config(GOOD)
    factory = build("--config", str(path))
    first = factory()
    assert isinstance(first, GenericBackend)
    assert first.resources == ["accel-plugins.io/kvm"]

    write_config(GOOD.replace("kvm", "fuse"))  # what SIGHUP picks up
    second = factory()
    assert isinstance(second, GenericBackend)
    assert second.resources == ["accel-plugins.io/fuse"]

    write_config("devices: {}\n")  # a broken edit: the manager keeps the old backend
    with pytest.raises(ConfigError, match=r"devices: expected a list, got a mapping"):
        factory()


async def test_the_command_exits_before_touching_the_kubelet(
    write_config: WriteConfig, tmp_path: Path
) -> None:
    path = write_config(
        "devices: [{name: a, groups: [{paths: [{path: /dev/a, permissions: rwx}]}]}]"
    )
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "accel_plugins.cli.main",
        "generic",
        "--config",
        str(path),
        "--plugin-dir",
        str(plugin_dir),
        "--metrics-address",
        "",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    field = "devices[0].groups[0].paths[0].permissions"
    expected = f"{path}: {field}: 'rwx' has letters other than r, w, m"
    assert stderr.decode().strip().endswith(expected)
    assert list(plugin_dir.iterdir()) == []


CHECKED = """\
devices:
  - name: serial
    groups: [{paths: [{path: /dev/ttyUSB*}]}, {paths: [{path: /dev/ttyACM*}]}]
  - name: video
    groups: [{paths: [{path: /dev/video0}]}]
"""


@pytest.mark.parametrize(
    ("nodes", "status", "lines"),
    [
        pytest.param(
            ["ttyUSB0", "ttyUSB1", "video0"],
            0,
            [
                "{config}: devices[0] (serial): accel-plugins.io/serial, 2 units "
                "(before count replicas)",
                "  groups[0] (paths): 2 found",
                "    /dev/ttyUSB0",
                "    /dev/ttyUSB1",
                "  groups[1] (paths): 0 found",
                "{config}: devices[1] (video): accel-plugins.io/video, 1 unit "
                "(before count replicas)",
                "  groups[0] (paths): 1 found",
                "    /dev/video0",
            ],
            id="every-entry-matches",
        ),
        pytest.param(
            ["ttyACM0"],
            2,
            [
                "{config}: devices[0] (serial): accel-plugins.io/serial, 1 unit "
                "(before count replicas)",
                "  groups[0] (paths): 0 found",
                "  groups[1] (paths): 1 found",
                "    /dev/ttyACM0",
                "{config}: devices[1] (video): matches nothing on this node; its resource has "
                "no devices until a match appears",
            ],
            id="one-entry-matches-nothing",
        ),
    ],
)
def test_check_config_lists_what_each_entry_matches(
    write_config: WriteConfig, tmp_path: Path, nodes: list[str], status: int, lines: list[str]
) -> None:
    path = write_config(CHECKED)
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in nodes:
        (dev / name).touch()  # globbing needs no device node; health is not reported here
    result = run_cli("generic", "--config", str(path), "--dev-root", str(dev), "--check-config")
    assert (result.returncode, result.stderr) == (status, "")
    assert result.stdout.splitlines() == [line.format(config=path) for line in lines]


def test_check_config_names_squats_device_flags(tmp_path: Path) -> None:
    device = '{"name": "video", "groups": [{"paths": [{"path": "/dev/video9"}]}]}'
    result = run_cli("generic", "--device", device, "--dev-root", str(tmp_path), "--check-config")
    assert result.returncode == 2
    assert result.stdout.startswith("--device[0] (video): matches nothing on this node")
