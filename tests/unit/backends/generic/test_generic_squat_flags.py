"""squat's command line on ``accel-plugins generic``: ``--device``, its config file, its aliases.

Sources, github.com/squat/generic-device-plugin at commit 179b1fe:
- config.go: the flags (``--config``, ``--domain`` default ``squat.ai``, ``--device``
  a pflag StringArray, ``--plugin-directory``, ``--log-level``, ``--listen`` default
  ``:8080``, ``--version``), bound to viper, which answers a key from a flag that was
  set, else the environment (AutomaticEnv), else the config file, else the flag's
  default; so ``--device`` values replace the file's ``device``/``devices`` list and
  the file's ``domain`` counts only without ``--domain``. Each ``--device`` value is
  read with ghodss/yaml (YAML to JSON, then encoding/json) into a DeviceSpec.
- deviceplugin/usb.go: USBID.UnmarshalJSON reads the JSON text's digits as hex.
- manifests/generic-device-plugin.yaml: the DaemonSet's args (tests/support/squat.py).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.command import COMMAND
from accel_plugins.backends.generic.config import UsbSpec, parse_config
from accel_plugins.cli.main import build_parser
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.command import BackendContext
from tests.fixtures.generic import REPO, WriteConfig
from tests.support.squat import (
    DAEMONSET_CONTAINER_ARGS,
    DAEMONSET_DEVICE_ARGS,
    squat_config_text,
)

KVM = "{name: kvm, groups: [{paths: [{path: /dev/kvm}]}]}"
FUSE = '{"name": "fuse", "groups": [{"count": 10, "paths": [{"path": "/dev/fuse"}]}]}'


def options(*argv: str) -> Mapping[str, Any]:
    """What ``accel-plugins generic ARGV`` hands the backend's build, as main does."""
    args = build_parser(["generic"]).parse_args(["generic", *argv])
    return {o.dest: getattr(args, o.dest) for o in COMMAND.options}


def backend(*argv: str) -> GenericBackend:
    made = COMMAND.build(BackendContext(options=options(*argv)))()
    assert isinstance(made, GenericBackend)
    return made


def resources(made: object) -> list[str]:
    assert isinstance(made, GenericBackend)
    return [made.resource(spec.name) for spec in made.config.devices]


# -- the shipped DaemonSet -----------------------------------------------------------

SHIPPED = parse_config(squat_config_text()).devices


@pytest.mark.parametrize(
    ("text", "index"),
    [pytest.param(text, i, id=SHIPPED[i].name) for i, text in enumerate(DAEMONSET_DEVICE_ARGS)],
)
def test_each_shipped_device_flag_reads_as_its_config_file_entry(text: str, index: int) -> None:
    assert backend("--device", text).config.devices == (SHIPPED[index],)


def test_the_shipped_args_unchanged_give_squats_resources() -> None:
    made = backend(*DAEMONSET_CONTAINER_ARGS)
    assert made.config.devices == SHIPPED
    # squat's default domain (config.go's defaultDomain), so pods' requests still fit.
    assert resources(made) == [f"squat.ai/{s.name}" for s in SHIPPED]


# -- --device beside --config and --domain (viper's precedence) ----------------------

PRECEDENCE = [
    pytest.param(
        f"devices: [{KVM}]\n", ["--device", FUSE], {}, ["squat.ai/fuse"], id="device-replaces-file"
    ),
    pytest.param(
        "domain: example.com\n",
        ["--device", FUSE],
        {},
        ["example.com/fuse"],
        id="file-domain-without-devices",
    ),
    pytest.param(
        f"domain: example.com\ndevices: [{KVM}]\n",
        [],
        {},
        ["example.com/kvm"],
        id="file-domain-file-devices",
    ),
    pytest.param(
        f"devices: [{KVM}]\n", [], {}, ["accel-plugins.io/kvm"], id="our-default-without-device"
    ),
    pytest.param(
        "domain: example.com\n",
        ["--device", FUSE, "--domain", "flag.example"],
        {},
        ["flag.example/fuse"],
        id="domain-flag-beats-file",
    ),
    pytest.param(
        "domain: example.com\n",
        ["--device", FUSE],
        {"ACCEL_PLUGINS_DOMAIN": "env.example"},
        ["env.example/fuse"],
        id="domain-env-beats-file",
    ),
    pytest.param(
        f"device: [{KVM}]\n",
        ["--device", FUSE, "--device", KVM],
        {},
        ["squat.ai/fuse", "squat.ai/kvm"],
        id="devices-in-flag-order",
    ),
]


@pytest.mark.parametrize(("text", "argv", "env", "expected"), PRECEDENCE)
def test_device_config_and_domain_combine_as_squats_viper(
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    argv: list[str],
    env: dict[str, str],
    expected: list[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    path = write_config(text)
    assert resources(backend("--config", str(path), *argv)) == expected


def test_device_without_config_needs_no_file() -> None:
    assert resources(backend("--device", KVM)) == ["squat.ai/kvm"]


def test_a_reload_reads_the_files_domain_again(write_config: WriteConfig) -> None:
    path = write_config("domain: one.example\n")
    factory = COMMAND.build(BackendContext(options=options("--config", str(path), "--device", KVM)))
    assert resources(factory()) == ["one.example/kvm"]
    write_config("domain: two.example\n")
    assert resources(factory()) == ["two.example/kvm"]


def test_the_env_twin_is_a_yaml_list_and_flags_replace_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCEL_PLUGINS_DEVICE", f"- {KVM}\n- '{FUSE}'\n")
    assert resources(backend()) == ["squat.ai/kvm", "squat.ai/fuse"]
    assert resources(backend("--device", FUSE)) == ["squat.ai/fuse"]


# -- squat's other flags ---------------------------------------------------------------

ALIASES = [
    pytest.param(
        ["--plugin-directory", "/k/dp"], "plugin_dir", Path("/k/dp"), id="plugin-directory"
    ),
    pytest.param(["--listen", ":8080"], "metrics_address", ":8080", id="listen"),
    pytest.param(["--listen=127.0.0.1:9"], "metrics_address", "127.0.0.1:9", id="listen-equals"),
    pytest.param(["--domain", "squat.ai"], "domain", "squat.ai", id="domain"),
    pytest.param(["--log-level", "debug"], "log_level", "debug", id="log-level-shared-value"),
]


@pytest.mark.parametrize(("argv", "dest", "value"), ALIASES)
def test_squats_flag_names_reach_ours(argv: list[str], dest: str, value: object) -> None:
    args = build_parser(["generic"]).parse_args(["generic", "--device", KVM, *argv])
    assert getattr(args, dest) == value


def test_the_aliases_are_the_generic_commands_only() -> None:
    with pytest.raises(SystemExit):
        build_parser(["nvidia"]).parse_args(["nvidia", "--plugin-directory", "/k"])


# -- USB IDs: --device reads them as squat's JSON path does --------------------------

USB = [
    pytest.param('"1a86"', 0x1A86, id="quoted-hex"),
    pytest.param("1209", 0x1209, id="unquoted-digits-are-hex"),
    pytest.param('"000F"', 0x000F, id="leading-zeros-quoted"),
]


@pytest.mark.parametrize(("written", "value"), USB)
def test_usb_ids_in_device_flags(written: str, value: int) -> None:
    text = f"{{name: key, groups: [{{usb: [{{vendor: {written}, product: {written}}}]}}]}}"
    (group,) = backend("--device", text).config.devices[0].groups
    assert group.usb == (UsbSpec(vendor=value, product=value),)


# -- malformed values: exit 2 naming --device[i] ----------------------------------------

BAD = [
    pytest.param("{name: [", "--device[1]: invalid YAML: ", id="yaml-syntax"),
    pytest.param("", "--device[1]: empty; expected one device", id="empty"),
    pytest.param("- a\n- b", "--device[1]: expected a mapping, got a list", id="a-list"),
    pytest.param("{groups: []}", "--device[1]: name: missing", id="no-name"),
    pytest.param(
        "{name: bad name, groups: [{paths: [{path: /dev/x}]}]}",
        "--device[1]: name: ",
        id="bad-name",
    ),
    pytest.param(
        "{name: s, groups: [{paths: [{path: dev/x}]}]}",
        "--device[1]: groups[0].paths[0].path: 'dev/x' is not an absolute path",
        id="relative-path",
    ),
    pytest.param(
        "{name: s, groups: [{paths: [{path: /dev/x, mountpath: /dev/y}]}]}",
        "--device[1]: groups[0].paths[0].mountpath: unknown key",
        id="unknown-key",
    ),
    pytest.param(
        "{name: s, groups: [{usb: [{vendor: 12345, product: 1}]}]}",
        "--device[1]: groups[0].usb[0].vendor: '12345' is not a USB ID",
        id="usb-id-too-long",
    ),
    pytest.param(KVM, "--device[1]: name: 'kvm' is already used by --device[0]", id="duplicate"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_device_value_names_flag_index_and_reason(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        backend("--device", KVM, "--device", text)
    assert str(caught.value).startswith(message)


def test_no_devices_at_all_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--config: required unless --device gives"):
        backend()


async def test_the_process_exits_2_before_touching_the_kubelet(tmp_path: Path) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    bad = "{name: s, groups: [{paths: [{path: /dev/x, permissions: rwx}]}]}"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "accel_plugins.cli.main", "generic",
        *DAEMONSET_CONTAINER_ARGS, "--device", bad,
        "--plugin-directory", str(plugin_dir), "--listen", "",
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    expected = "--device[5]: groups[0].paths[0].permissions: 'rwx' has letters other than r, w, m"
    assert stderr.decode().strip().endswith(expected)
    assert list(plugin_dir.iterdir()) == []
