"""NVIDIA config file v1, NVIDIA's env names, and flag > env > file precedence."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.command import COMMAND
from accel_plugins.backends.nvidia.config.config import (
    Overrides,
    ReplicaDevices,
    ReplicatedResource,
    TimeSlicing,
    load_config_file,
    resolve,
)
from accel_plugins.backends.nvidia.factory import load_settings
from accel_plugins.cli.main import add_options
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
        pytest.param("version: 1\n", "version", "unknown version '1'", id="version-number"),
        pytest.param("[a]\n", "", "expected a mapping", id="not-a-mapping"),
        pytest.param("flags: []\n", "flags", "expected a mapping", id="flags-list"),
        pytest.param(
            "flags: {migStrategy: all}\n", "flags.migStrategy", "not one of", id="mig-strategy"
        ),
        pytest.param(
            "flags: {failOnInitError: 'yes'}\n",
            "flags.failOnInitError",
            "true or false",
            id="bool-as-string",
        ),
        pytest.param(
            "flags: {mpsRoot: [a]}\n", "flags.mpsRoot", "expected a string", id="string-as-list"
        ),
        pytest.param(
            "flags: {plugin: {deviceListStrategy: [envvar, files]}}\n",
            "flags.plugin.deviceListStrategy",
            "unknown strategy 'files'",
            id="list-strategy",
        ),
        pytest.param(
            "flags: {plugin: {deviceListStrategy: 1}}\n",
            "flags.plugin.deviceListStrategy",
            "expected a strategy or a list",
            id="strategy-number",
        ),
        pytest.param(
            "flags: {plugin: {deviceIDStrategy: serial}}\n",
            "flags.plugin.deviceIDStrategy",
            "not one of",
            id="id-strategy",
        ),
        pytest.param(
            "flags: {plugin: {sharedDevicesAllocationPolicy: spread}}\n",
            "flags.plugin.sharedDevicesAllocationPolicy",
            "not one of distributed, packed",
            id="shared-policy",
        ),
        pytest.param(
            "flags: {deviceDiscoveryStrategy: wsl}\n",
            "flags.deviceDiscoveryStrategy",
            "not one of auto, nvml, tegra",
            id="discovery",
        ),
        pytest.param(
            "flags: {gfd: {sleepInterval: soon}}\n",
            "flags.gfd.sleepInterval",
            "not a duration",
            id="gfd-duration",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: []}}\n",
            "sharing.timeSlicing.resources",
            "no resources specified",
            id="no-resources",
        ),
        pytest.param(
            "sharing: {timeSlicing: {}}\n",
            "sharing.timeSlicing",
            "no resources specified",
            id="empty-time-slicing",
        ),
        pytest.param(
            "sharing: {timeSlicing: }\n",
            "sharing.timeSlicing",
            "no resources specified",
            id="null-time-slicing",
        ),
        pytest.param(
            "sharing: {mps: {}}\n", "sharing.mps", "no resources specified", id="empty-mps"
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}\n",
            "sharing.timeSlicing.resources[0].replicas",
            ">= 2",
            id="one-replica",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu}]}}\n",
            "sharing.timeSlicing.resources[0].replicas",
            "no replicas specified",
            id="no-replicas",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: '2'}]}}\n",
            "sharing.timeSlicing.resources[0].replicas",
            "expected a whole number",
            id="replicas-as-string",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: example.com/fpga, replicas: 2}]}}\n",
            "sharing.timeSlicing.resources[0].name",
            "'nvidia.com/example.com/fpga' is not a valid resource name",
            id="foreign-domain",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: GPU, replicas: 2}]}}\n",
            "sharing.timeSlicing.resources[0].name",
            "not a valid resource name",
            id="upper-case-name",
        ),
        pytest.param(
            f"sharing: {{timeSlicing: {{resources: [{{name: {'g' * 53}, replicas: 2}}]}}}}\n",
            "sharing.timeSlicing.resources[0].name",
            "longer than 63 characters",
            id="long-name",
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
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, rename: null}]}}\n",
            "sharing.timeSlicing.resources[0].rename",
            "expected a resource name",
            id="null-rename",
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
            "MPS needs an MPS root",
            id="mps-without-root",
        ),
        pytest.param(
            "flags: {migStrategy: mixed, mpsRoot: /run/nvidia/mps}\n"
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n",
            "sharing.mps",
            "mixed is not supported with MPS",
            id="mps-with-mixed",
        ),
        pytest.param(
            "imex: {channelIDs: [0, 1]}\n", "imex.channelIDs", "must be [] or [0]", id="imex"
        ),
        pytest.param(
            "imex: {channelIDs: ['0']}\n", "imex.channelIDs[0]", "whole number", id="imex-string"
        ),
        pytest.param(
            "resources: {gpus: [{pattern: '*'}]}\n",
            "resources.gpus[0].name",
            "must have a 'name' field",
            id="resource-without-name",
        ),
    ],
)
def test_bad_files_name_file_field_and_reason(
    tmp_path: Path, text: str, field: str, reason: str
) -> None:
    """What NVIDIA's parser or its validateFlags refuses, refused with file, field and reason."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        resolve(Overrides(), load_config_file(path))
    assert caught.value.source == str(path)
    assert caught.value.field == field
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("text", "check"),
    [
        pytest.param("", lambda c: c.mig_strategy is None, id="empty-file"),
        pytest.param("version: ''\n", lambda c: True, id="empty-version"),
        pytest.param("flags:\n", lambda c: c.gfd is None, id="null-flags"),
        pytest.param("sharing: {mps: }\n", lambda c: c.mps is None, id="null-mps"),
        pytest.param(
            "flags: {plugin: {deviceListStrategy: [envvar, envvar]}}\n",
            lambda c: c.device_list_strategy == ("envvar", "envvar"),
            id="repeated-strategy",
        ),
        pytest.param(
            "flags: {mpsRoot: 1, nvidiaDriverRoot: true}\n",
            lambda c: (c.mps_root, c.nvidia_driver_root) == ("1", "true"),
            id="numbers-in-string-fields",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2.0}]}}\n",
            lambda c: c.time_slicing.resources[0].replicas == 2,
            id="integral-float-replicas",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: valid, replicas: 2}]}}\n",
            lambda c: c.time_slicing.resources[0].name == "nvidia.com/valid",
            id="any-valid-name",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: ['007']}]}}\n",
            lambda c: c.time_slicing.resources[0].devices == ReplicaDevices(refs=("7",)),
            id="index-with-zeros",
        ),
    ],
)
def test_what_nvidia_accepts_loads(tmp_path: Path, text: str, check: Any) -> None:
    config = load_config_file(write(tmp_path, text))
    assert check(config)
    resolve(Overrides(), config)


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


# -- keys NVIDIA does not define: loaded with a warning, refused with --strict-config ----


@pytest.mark.parametrize(
    ("text", "path", "hint"),
    [
        pytest.param(
            "flags: {migStratgy: none}\n", "flags.migStratgy", "did you mean migStrategy?"
        ),
        pytest.param("flag: {}\n", "flag", "did you mean flags?"),
        pytest.param(
            "flags: {plugin: {mpsRoot: /run/nvidia/mps}}\n",
            "flags.plugin.mpsRoot",
            "known keys:",
            id="plugin-mpsRoot-is-not-nvidias",
        ),
        pytest.param(
            "sharing: {timeSlicing: {resources: [{name: gpu, replica: 2, replicas: 2}]}}\n",
            "sharing.timeSlicing.resources[0].replica",
            "did you mean replicas?",
        ),
        pytest.param("health: {}\n", "health", "known keys: version, flags"),
    ],
)
def test_unknown_keys_load_with_a_warning_and_strict_refuses_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, path: str, hint: str
) -> None:
    file = write(tmp_path, text)
    config = load_config_file(file)
    assert config.ignored == (path,)
    [record] = [r for r in caplog.records if path in r.getMessage()]
    assert record.levelname == "WARNING"
    assert record.getMessage().startswith(f"{file}: {path}: unknown key, ignored")
    assert hint in record.getMessage()
    with pytest.raises(ConfigError) as caught:
        load_config_file(file, strict=True)
    assert (caught.value.source, caught.value.field) == (str(file), path)
    assert hint in caught.value.reason


def test_keys_match_ignoring_case_as_in_nvidias_plugin(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    file = write(tmp_path, "Flags: {MigStrategy: mixed, plugin: {deviceidstrategy: index}}\n")
    config = load_config_file(file)
    assert (config.mig_strategy, config.device_id_strategy) == ("mixed", "index")
    assert f"{file}: Flags: read as flags" in caplog.text
    assert "write migStrategy" in caplog.text
    with pytest.raises(ConfigError, match="write flags"):
        load_config_file(file, strict=True)


def test_sharing_entries_match_keys_exactly_as_nvidias_decoder(tmp_path: Path) -> None:
    """NVIDIA's own ReplicatedResource decoder looks "replicas" up exactly: Replicas is unknown."""
    text = "sharing: {timeSlicing: {resources: [{name: gpu, Replicas: 2}]}}\n"
    with pytest.raises(ConfigError, match="no replicas specified"):
        load_config_file(write(tmp_path, text))


def test_strict_config_flag_reaches_the_loader(tmp_path: Path) -> None:
    path = write(tmp_path, "flags: {migStratgy: none}\n")
    options = parse(["--config", str(path), "--simulate", "pcie-4gpu"])
    COMMAND.build(BackendContext(options=options))
    with pytest.raises(ConfigError, match="did you mean migStrategy"):
        COMMAND.build(BackendContext(options=options | {"strict_config": True}))


def test_rename_and_devices_are_honoured_and_said_to_be_ignored_by_nvidia(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = (
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [0],"
        " rename: gpu-shared}]}}\n"
    )
    [entry] = load_config_file(write(tmp_path, text)).time_slicing.resources
    assert (entry.rename, entry.devices) == ("nvidia.com/gpu-shared", ReplicaDevices(refs=("0",)))
    assert "resources[0].rename: honoured here (nvidia.com/gpu-shared); NVIDIA's plugin" in (
        caplog.text
    )
    assert "would advertise nvidia.com/gpu" in caplog.text
    assert "resources[0].devices: honoured here; NVIDIA's plugin ignores devices" in caplog.text


# -- every NVIDIA flag and variable: flag > env > file > default -------------------------

ALL_IN_FILE = """
version: v1
flags:
  mpsRoot: /file/mps
  nvidiaDriverRoot: /file/driver
  nvidiaDevRoot: /file/dev
  gdrcopyEnabled: true
  gdsEnabled: true
  mofedEnabled: true
  deviceDiscoveryStrategy: nvml
  plugin:
    cdiAnnotationPrefix: file.example.com/
    nvidiaCTKPath: /file/nvidia-ctk
    containerDriverRoot: /file/driver-root
    sharedDevicesAllocationPolicy: packed
imex:
  channelIDs: [0]
  required: true
"""


def _pick(settings: Any, attribute: str) -> object:
    value = settings
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize(
    ("attribute", "flag", "env", "from_file", "flag_value", "env_value", "default"),
    [
        ("mps_root", ["--mps-root", "/f"], {"MPS_ROOT": "/e"}, "/file/mps", "/f", "/e", ""),
        (
            "driver_root",
            ["--driver-root", "/f"],
            {"NVIDIA_DRIVER_ROOT": "/e"},
            Path("/file/driver"),
            Path("/f"),
            Path("/e"),
            Path("/"),
        ),
        (
            "dev_root",
            ["--dev-root", "/f"],
            {"NVIDIA_DEV_ROOT": "/e"},
            Path("/file/dev"),
            Path("/f"),
            Path("/e"),
            Path("/"),
        ),
        (
            "allocate.gdrcopy_enabled",
            ["--gdrcopy-enabled=false"],
            {"GDRCOPY_ENABLED": "false"},
            True,
            False,
            False,
            False,
        ),
        (
            "allocate.gds_enabled",
            ["--gds-enabled=false"],
            {"GDS_ENABLED": "false"},
            True,
            False,
            False,
            False,
        ),
        (
            "allocate.mofed_enabled",
            ["--mofed-enabled=false"],
            {"MOFED_ENABLED": "false"},
            True,
            False,
            False,
            False,
        ),
        (
            "allocate.cdi_annotation_prefix",
            ["--cdi-annotation-prefix", "f/"],
            {"CDI_ANNOTATION_PREFIX": "e/"},
            "file.example.com/",
            "f/",
            "e/",
            "cdi.k8s.io/",
        ),
        (
            "nvidia_ctk_path",
            ["--nvidia-ctk-path", "/f"],
            {"NVIDIA_CTK_PATH": "/e"},
            "/file/nvidia-ctk",
            "/f",
            "/e",
            "/usr/bin/nvidia-ctk",
        ),
        (
            "nvidia_ctk_path",
            ["--nvidia-cdi-hook-path", "/f"],
            {"NVIDIA_CDI_HOOK_PATH": "/e"},
            "/file/nvidia-ctk",
            "/f",
            "/e",
            "/usr/bin/nvidia-ctk",
        ),
        (
            "container_driver_root",
            ["--container-driver-root", "/f"],
            {"CONTAINER_DRIVER_ROOT": "/e"},
            "/file/driver-root",
            "/f",
            "/e",
            "/driver-root",
        ),
        (
            "container_driver_root",
            ["--driver-root-ctr-path", "/f"],
            {"DRIVER_ROOT_CTR_PATH": "/e"},
            "/file/driver-root",
            "/f",
            "/e",
            "/driver-root",
        ),
        (
            "device_discovery_strategy",
            ["--device-discovery-strategy", "auto"],
            {"DEVICE_DISCOVERY_STRATEGY": "auto"},
            "nvml",
            "auto",
            "auto",
            "auto",
        ),
        (
            "replica_policy",
            ["--shared-devices-allocation-policy", "distributed"],
            {"SHARED_DEVICES_ALLOCATION_POLICY": "distributed"},
            "packed",
            "spread",
            "spread",
            "spread",
        ),
        (
            "imex.channel_ids",
            ["--imex-channel-ids", ""],
            {"IMEX_CHANNEL_IDS": ""},
            (0,),
            (),
            (),
            (),
        ),
        (
            "imex.required",
            ["--imex-required=false"],
            {"IMEX_REQUIRED": "false"},
            True,
            False,
            False,
            False,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and "." not in v and "/" not in v else None,
)
def test_every_nvidia_flag_and_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    attribute: str,
    flag: list[str],
    env: dict[str, str],
    from_file: object,
    flag_value: object,
    env_value: object,
    default: object,
) -> None:
    for name in (*env, "CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    config = ["--config-file", str(write(tmp_path, ALL_IN_FILE))]
    assert _pick(load_settings(parse([]), environ={}), attribute) == default
    assert _pick(load_settings(parse(config), environ={}), attribute) == from_file
    assert _pick(load_settings(parse(config + flag), environ={}), attribute) == flag_value
    for name, text in env.items():
        monkeypatch.setenv(name, text)
    assert _pick(load_settings(parse(config), environ={}), attribute) == env_value


def test_dev_root_defaults_to_the_driver_root(tmp_path: Path) -> None:
    settings = load_settings(parse(["--driver-root", "/run/nvidia/driver"]), environ={})
    assert settings.dev_root == settings.allocate.dev_root == Path("/run/nvidia/driver")
    empty = parse(["--driver-root", "/run/nvidia/driver", "--dev-root", ""])
    assert load_settings(empty, environ={}).dev_root == Path("/run/nvidia/driver")


def test_a_flag_overrides_a_bad_file_value_as_in_nvidias_plugin(tmp_path: Path) -> None:
    """NVIDIA checks the merged value (validateFlags), so the flag's wins before any check."""
    path = write(tmp_path, "flags: {migStrategy: double}\n")
    settings = load_settings(parse(["--config", str(path), "--mig-strategy", "single"]), {})
    assert settings.mig_strategy == "single"


def test_imex_channel_ids_flag_form() -> None:
    assert parse(["--imex-channel-ids", "0"])["imex_channel_ids"] == (0,)
    with pytest.raises(argparse.ArgumentError, match="channel numbers"):
        parse(["--imex-channel-ids", "zero"])
    with pytest.raises(ConfigError, match=r"must be \[\] or \[0\]; found \[1\]") as caught:
        load_settings(parse(["--imex-channel-ids", "1"]), environ={})
    assert caught.value.source == "--imex-channel-ids"


# -- at start: what the plugin cannot serve yet, IMEX channels on the node ----------------


def test_a_valid_mps_config_is_served(tmp_path: Path) -> None:
    path = write(tmp_path, "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n")
    options = parse(["--config", str(path), "--mps-root", str(tmp_path / "mps")])
    assert load_settings(options, environ={}).mps is not None  # parsed and validated
    factory = COMMAND.build(BackendContext(options=options | {"simulate": "pcie-4gpu"}))
    assert factory() is not None


def test_tegra_discovery_is_refused_at_start() -> None:
    options = parse(["--device-discovery-strategy", "tegra", "--simulate", "pcie-4gpu"])
    with pytest.raises(ConfigError, match="tegra is not supported"):
        COMMAND.build(BackendContext(options=options))


def test_required_imex_channel_missing_stops_the_start(tmp_path: Path) -> None:
    argv = ["--simulate", "pcie-4gpu", "--dev-root", str(tmp_path), "--imex-channel-ids", "0"]
    COMMAND.build(BackendContext(options=parse(argv)))  # not required: skipped
    with pytest.raises(ConfigError, match="channel0 does not exist") as caught:
        COMMAND.build(BackendContext(options=parse([*argv, "--imex-required"])))
    assert caught.value.source == "--imex-channel-ids"


def test_imex_channel_present_reaches_every_allocation(tmp_path: Path) -> None:
    from accel_plugins.backends.nvidia.factory import runnable_settings
    from accel_plugins.testing import FakeHost

    host = FakeHost(tmp_path)
    host.node("/dev/nvidia-caps-imex-channels/channel0", major=509, minor=0)
    argv = ["--dev-root", str(tmp_path), "--imex-channel-ids", "0", "--imex-required"]
    settings = runnable_settings(parse(argv), environ={})
    assert [c.path for c in settings.allocate.imex_channels] == [
        "/dev/nvidia-caps-imex-channels/channel0"
    ]


def test_a_shared_resource_the_node_lacks_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(
        tmp_path, "sharing: {timeSlicing: {resources: [{name: mig-1g.5gb, replicas: 2}]}}\n"
    )
    COMMAND.build(
        BackendContext(options=parse(["--config", str(path), "--simulate", "pcie-4gpu"]))
    )()
    assert (
        f"{path}: sharing.timeSlicing.resources[0].name: nvidia.com/mig-1g.5gb matches no device"
        in caplog.text
    )


@pytest.mark.parametrize(
    ("argv", "file", "strategies", "disabled_hooks"),
    [
        pytest.param([], None, ("cdi-cri",), ("update-application-profile",), id="defaults"),
        pytest.param(
            ["--device-list-strategy", "envvar"], None, ("envvar",),
            ("update-application-profile",), id="the flag asks for the env-only answer",
        ),
        pytest.param(
            [], "version: v1\nflags:\n  plugin:\n    deviceListStrategy: envvar\n", ("envvar",),
            ("update-application-profile",), id="the file asks for it",
        ),
        pytest.param(
            ["--cdi-disable-hooks", "update-ldcache"], None, ("cdi-cri",), ("update-ldcache",),
            id="a hook list given replaces the default",
        ),
    ],
)  # fmt: skip
def test_dra_mode_defaults_to_self_contained_cdi_devices(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    file: str | None,
    strategies: tuple[str, ...],
    disabled_hooks: tuple[str, ...],
) -> None:
    """As NVIDIA's DRA driver answers a claim (issue 35): cdi-cri, without the hook its
    toolkit (v1.19.1) lacks; whatever the operator sets, by flag or file, wins."""
    if file is not None:
        monkeypatch.setenv("CONFIG_FILE", str(write(tmp_path, file)))
    settings = load_settings(parse(argv), environ={}, dra=True)
    assert settings.allocate.device_list_strategies == strategies
    assert settings.cdi_disable_hooks == disabled_hooks
    plain = load_settings(parse(argv), environ={})
    assert plain.cdi_disable_hooks == (disabled_hooks if "--cdi-disable-hooks" in argv else ())
