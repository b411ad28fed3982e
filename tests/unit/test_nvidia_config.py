"""NVIDIA config file v1, NVIDIA's env names, and flag > env > file precedence."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.command import COMMAND
from accel_plugins.backends.nvidia.config import (
    ReplicaDevices,
    ReplicatedResource,
    TimeSlicing,
    load_config_file,
)
from accel_plugins.backends.nvidia.factory import load_settings
from accel_plugins.cli import add_options
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.command import BackendContext

# Shaped after the examples in NVIDIA's plugin documentation.
DOC_FLAGS = """
version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
"""
DOC_TIME_SLICING = """
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
DOC_RENAMED = """
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
DOC_MIG_MIXED = """
version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
    - name: nvidia.com/mig-1g.5gb
      replicas: 2
      devices: ["0:2", 1]
    - name: mig-2g.10gb
      rename: nvidia.com/mig-2g.10gb.shared
      replicas: 3
"""
DOC_WITH_GFD = """
version: v1
flags:
  migStrategy: single
  gfd:
    oneshot: false
    sleepInterval: 60s
  plugin:
    deviceListStrategy: [envvar, cdi-annotations]
    deviceIDStrategy: index
    passDeviceSpecs: true
"""


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_flags_example(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path, DOC_FLAGS))
    assert (config.mig_strategy, config.fail_on_init_error, config.nvidia_driver_root) == (
        "none",
        True,
        "/",
    )
    assert config.pass_device_specs is False
    assert config.device_list_strategy == ("envvar",)
    assert config.device_id_strategy == "uuid"
    assert config.time_slicing == TimeSlicing()


def test_time_slicing_example(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path, DOC_TIME_SLICING))
    assert config.time_slicing.resources == (
        ReplicatedResource(
            name="nvidia.com/gpu",
            rename="nvidia.com/gpu",
            devices=ReplicaDevices(all=True),
            replicas=10,
            where="sharing.timeSlicing.resources[0]",
        ),
    )


def test_rename_by_default_example(tmp_path: Path) -> None:
    sharing = load_config_file(write(tmp_path, DOC_RENAMED)).time_slicing
    assert sharing.rename_by_default
    assert sharing.fail_requests_greater_than_one
    assert sharing.resources[0].rename == "nvidia.com/gpu.shared"


def test_mig_mixed_sharing_example(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path, DOC_MIG_MIXED))
    assert config.mig_strategy == "mixed"
    assert [(r.name, r.rename, r.replicas) for r in config.time_slicing.resources] == [
        ("nvidia.com/gpu", "nvidia.com/gpu", 2),
        ("nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.5gb", 2),
        ("nvidia.com/mig-2g.10gb", "nvidia.com/mig-2g.10gb.shared", 3),
    ]
    assert config.time_slicing.resources[1].devices == ReplicaDevices(refs=("0:2", "1"))


def test_sections_for_other_components_are_accepted(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path, DOC_WITH_GFD))
    assert config.mig_strategy == "single"
    assert config.device_list_strategy == ("envvar", "cdi-annotations")
    assert config.device_id_strategy == "index"
    assert config.pass_device_specs is True


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        pytest.param("version: v2\n", "version", "unknown version 'v2'", id="version"),
        pytest.param("", "", "the file is empty", id="empty"),
        pytest.param("version: v1\nflag: {}\n", "flag", "unknown field", id="typo-top"),
        pytest.param(
            "flags: {migStrategy: all}\n", "flags.migStrategy", "not one of", id="mig-strategy"
        ),
        pytest.param(
            "flags: {migStratgy: none}\n", "flags.migStratgy", "unknown field", id="typo-flag"
        ),
        pytest.param(
            "flags: {failOnInitError: 'yes'}\n",
            "flags.failOnInitError",
            "true or false",
            id="bool-as-string",
        ),
        pytest.param(
            "flags: {plugin: {deviceListStrategy: [envvar, files]}}\n",
            "flags.plugin.deviceListStrategy",
            "unknown strategy 'files'",
            id="list-strategy",
        ),
        pytest.param(
            "flags: {plugin: {deviceListStrategy: [envvar, envvar]}}\n",
            "flags.plugin.deviceListStrategy",
            "repeated",
            id="repeated-strategy",
        ),
        pytest.param(
            "flags: {plugin: {deviceIDStrategy: serial}}\n",
            "flags.plugin.deviceIDStrategy",
            "not one of",
            id="id-strategy",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: []}}\n",
            "sharing.timeSlicing.resources",
            "at least one",
            id="no-resources",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 0}]}}\n",
            "sharing.timeSlicing.resources[0].replicas",
            ">= 1",
            id="zero-replicas",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu}]}}\n",
            "sharing.timeSlicing.resources[0].replicas",
            ">= 1",
            id="no-replicas",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: example.com/fpga, replicas: 2}]}}\n",
            "sharing.timeSlicing.resources[0].name",
            "not nvidia.com/gpu",
            id="foreign-resource",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}}\n",
            "sharing.timeSlicing.resources[0].devices",
            "only string accepted is 'all'",
            id="devices-string",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [GPU-1]}]}}\n",
            "sharing.timeSlicing.resources[0].devices[0]",
            "not a GPU index",
            id="devices-bad-ref",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, rename: 'a b'}]}}\n",
            "sharing.timeSlicing.resources[0].rename",
            "not a valid resource name",
            id="bad-rename",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2},"
            " {name: gpu, replicas: 3, devices: [1]}]}}\n",
            "sharing.timeSlicing.resources[1].devices",
            "already shares all devices",
            id="split-after-all",
        ),
        pytest.param(
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n",
            "sharing.mps",
            "not supported",
            id="mps",
        ),
    ],
)
def test_bad_files_name_file_field_and_reason(
    tmp_path: Path, text: str, field: str, reason: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert caught.value.source == str(path)
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_unreadable_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_file(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config_file(write(tmp_path, "flags: [\n"))


def parse(argv: list[str]) -> dict[str, Any]:
    """The option values ``accel-plugins nvidia ARGV`` gives COMMAND.build."""
    parser = argparse.ArgumentParser(prog="accel-plugins nvidia", exit_on_error=False)
    add_options(parser, COMMAND.options)
    return vars(parser.parse_args(argv))


FILE_SAYS = """
version: v1
flags:
  migStrategy: single
  failOnInitError: false
  nvidiaDriverRoot: /from/file
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: volume-mounts
    deviceIDStrategy: index
"""


@pytest.mark.parametrize(
    ("argv", "env", "attribute", "value"),
    [
        pytest.param([], {}, "mig_strategy", "single", id="file-over-default"),
        pytest.param([], {"MIG_STRATEGY": "mixed"}, "mig_strategy", "mixed", id="nvidia-env"),
        pytest.param(
            [],
            {"ACCEL_PLUGINS_MIG_STRATEGY": "none", "MIG_STRATEGY": "mixed"},
            "mig_strategy",
            "none",
            id="our-env-first",
        ),
        pytest.param(
            ["--mig-strategy", "none"],
            {"MIG_STRATEGY": "mixed"},
            "mig_strategy",
            "none",
            id="flag-over-env",
        ),
        pytest.param([], {"FAIL_ON_INIT_ERROR": "true"}, "fail_on_init_error", True, id="bool-env"),
        pytest.param(
            [],
            {"NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"},
            "driver_root",
            Path("/run/nvidia/driver"),
            id="driver-root-env",
        ),
        pytest.param([], {}, "driver_root", Path("/from/file"), id="driver-root-file"),
    ],
)
def test_precedence(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    attribute: str,
    value: object,
) -> None:
    for name, text in env.items():
        monkeypatch.setenv(name, text)
    monkeypatch.setenv("CONFIG_FILE", str(write(tmp_path, FILE_SAYS)))
    settings = load_settings(parse(argv), environ={})
    assert getattr(settings, attribute) == value


@pytest.mark.parametrize(
    ("argv", "env", "strategies", "id_strategy", "specs"),
    [
        pytest.param([], {}, ("volume-mounts",), "index", True, id="all-from-file"),
        pytest.param(
            ["--device-list-strategy", "envvar,cdi-cri"],
            {},
            ("envvar", "cdi-cri"),
            "index",
            True,
            id="combined-flag",
        ),
        pytest.param(
            [],
            {"DEVICE_LIST_STRATEGY": "cdi-annotations", "DEVICE_ID_STRATEGY": "uuid"},
            ("cdi-annotations",),
            "uuid",
            True,
            id="nvidia-env",
        ),
        pytest.param(
            ["--pass-device-specs=false"],
            {"PASS_DEVICE_SPECS": "true"},
            ("volume-mounts",),
            "index",
            False,
            id="bool-flag-over-env",
        ),
        pytest.param(
            [],
            {"PASS_DEVICE_SPECS": "false"},
            ("volume-mounts",),
            "index",
            False,
            id="bool-env-over-file",
        ),
    ],
)
def test_plugin_flag_precedence(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    strategies: tuple[str, ...],
    id_strategy: str,
    specs: bool,
) -> None:
    for name, text in env.items():
        monkeypatch.setenv(name, text)
    argv = ["--config", str(write(tmp_path, FILE_SAYS)), *argv]
    allocate = load_settings(parse(argv), environ={}).allocate
    assert (allocate.device_list_strategies, allocate.device_id_strategy) == (
        strategies,
        id_strategy,
    )
    assert allocate.pass_device_specs is specs


def test_defaults_without_file_flag_or_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONFIG_FILE", "MIG_STRATEGY", "DEVICE_LIST_STRATEGY", "NVIDIA_DRIVER_ROOT"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(parse([]), environ={})
    assert settings.mig_strategy == "none"
    assert settings.fail_on_init_error is True
    assert settings.driver_root == Path("/")
    assert settings.allocate.device_list_strategies == ("envvar",)
    assert settings.allocate.device_id_strategy == "uuid"
    assert settings.allocate.pass_device_specs is False
    assert settings.health_recovery_seconds == 60


def test_health_env_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    env = {"DP_DISABLE_HEALTHCHECKS": "48", "DP_ENABLE_HEALTHCHECKS": "13"}
    settings = load_settings(parse([]), environ=env)
    assert (settings.disable_healthchecks, settings.enable_healthchecks) == ("48", "13")


def test_bad_flag_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEVICE_LIST_STRATEGY", raising=False)
    with pytest.raises(argparse.ArgumentError, match="unknown strategy 'files'"):
        parse(["--device-list-strategy", "files"])


def test_backend_factory_validates_the_file_eagerly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MIG_STRATEGY", raising=False)
    path = write(tmp_path, "version: v1\nflags: {migStrategy: double}\n")
    with pytest.raises(ConfigError) as caught:
        COMMAND.build(
            BackendContext(options=parse(["--config", str(path), "--simulate", "pcie-4gpu"]))
        )
    assert str(caught.value) == (
        f"{path}: flags.migStrategy: 'double' is not one of none, single, mixed"
    )


def test_backend_factory_refuses_an_unknown_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFIG_FILE", raising=False)
    with pytest.raises(ConfigError, match="neither a built-in profile"):
        COMMAND.build(BackendContext(options=parse(["--simulate", "dgx-b900"])))
