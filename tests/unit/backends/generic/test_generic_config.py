"""The generic backend's config loader: squat's format, our udev matchers, strict errors."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accel_plugins.backends.generic.config import (
    DeviceSpec,
    GenericConfig,
    Group,
    PathSpec,
    PathType,
    UdevMatcher,
    UsbSpec,
    load_config,
    parse_config,
)
from accel_plugins.errors import ConfigError
from tests.fixtures.generic import WriteConfig
from tests.support.repo import ROOT as REPO_ROOT


def one_group(text: str) -> Group:
    config = parse_config(textwrap.dedent(text), "config.yaml")
    (device,) = config.devices
    (group,) = device.groups
    return group


GOOD = [
    pytest.param(
        """
        devices:
          - name: serial
            groups:
              - paths:
                  - path: /dev/ttyUSB*
        """,
        Group(paths=(PathSpec("/dev/ttyUSB*"),)),
        id="squat-defaults",
    ),
    pytest.param(
        """
        devices:
          - name: audio
            groups:
              - count: 10
                paths:
                  - {path: /dev/snd/controlC0, mountPath: /dev/snd/, permissions: rw}
                  - {path: /dev/snd/pcmC0D0c, limit: 3, optional: true}
        """,
        Group(
            paths=(
                PathSpec("/dev/snd/controlC0", mount_path="/dev/snd/", permissions="rw"),
                PathSpec("/dev/snd/pcmC0D0c", limit=3, optional=True),
            ),
            count=10,
        ),
        id="squat-every-path-key",
    ),
    pytest.param(
        """
        devices:
          - name: fuse
            groups:
              - count: 0
                paths: [{path: /dev/fuse, limit: 0}]
        """,
        Group(paths=(PathSpec("/dev/fuse"),)),
        id="zero-count-and-limit-mean-default",
    ),
    pytest.param(
        """
        devices:
          - name: models
            groups:
              - paths:
                  - {path: /srv/models, mountPath: /models, type: Mount, readOnly: true}
        """,
        Group(
            paths=(
                PathSpec("/srv/models", mount_path="/models", type=PathType.MOUNT, read_only=True),
            )
        ),
        id="mount-outside-dev",
    ),
    pytest.param(
        """
        devices:
          - name: weird
            groups:
              - paths:
                  - {path: /dev/vfio/7, mountPath: /vfio/7, allowMountPathOutsideDev: true}
        """,
        Group(
            paths=(
                PathSpec("/dev/vfio/7", mount_path="/vfio/7", allow_mount_path_outside_dev=True),
            )
        ),
        id="device-outside-dev-with-opt-in",
    ),
    pytest.param(
        """
        devices:
          - name: ch340
            groups:
              - usb:
                  - {vendor: "1a86", product: "7523"}
                  - {vendor: "1209", product: "0x000F", serial: "A1"}
        """,
        Group(usb=(UsbSpec(0x1A86, 0x7523), UsbSpec(0x1209, 0x000F, "A1"))),
        id="usb-hex-ids",
    ),
    pytest.param(
        """
        devices:
          - name: mic
            groups:
              - udev:
                  - subsystem: sound
                    kernel: "pcmC*c"
                    properties: {ID_BUS: usb, MINOR: 24}
                    attributes: {idVendor: "0d8c"}
                    permissions: rw
                    mountPath: /dev/snd/
                  - {subsystem: sound, kernel: "controlC*", optional: true}
        """,
        Group(
            udev=(
                UdevMatcher(
                    subsystem="sound",
                    kernel="pcmC*c",
                    properties={"ID_BUS": "usb", "MINOR": "24"},
                    attributes={"idVendor": "0d8c"},
                    permissions="rw",
                    mount_path="/dev/snd/",
                ),
                UdevMatcher(subsystem="sound", kernel="controlC*", optional=True),
            )
        ),
        id="udev-matchers",
    ),
]


@pytest.mark.parametrize(("text", "expected"), GOOD)
def test_good_configs(text: str, expected: Group) -> None:
    assert one_group(text) == expected


def test_several_devices_keep_their_order() -> None:
    config = parse_config(
        textwrap.dedent(
            """
            devices:
              - {name: b, groups: [{paths: [{path: /dev/b}]}]}
              - {name: a, groups: [{paths: [{path: /dev/a}]}, {paths: [{path: /dev/aa}]}]}
            """
        ),
        "c.yaml",
    )
    assert config == GenericConfig(
        (
            DeviceSpec("b", (Group(paths=(PathSpec("/dev/b"),)),)),
            DeviceSpec(
                "a", (Group(paths=(PathSpec("/dev/a"),)), Group(paths=(PathSpec("/dev/aa"),)))
            ),
        ),
        "c.yaml",
    )


def serial(path_entry: str) -> str:
    return f"devices:\n  - name: serial\n    groups:\n      - paths:\n          - {path_entry}\n"


BAD = [
    pytest.param(
        "", "config.yaml: the file is empty; expected a mapping with a 'devices' list", id="empty"
    ),
    pytest.param("devices: [\n", "config.yaml: invalid YAML: line 2, column 1: ", id="yaml-syntax"),
    pytest.param(
        "devices: []\ndevices: []\n",
        "config.yaml: invalid YAML: line 2, column 1: duplicate key 'devices'",
        id="duplicate-key",
    ),
    pytest.param("- a\n", "config.yaml: expected a mapping, got a list", id="top-level-list"),
    pytest.param(
        # squat's viper would also read its flags' keys here; we read domain only.
        "listen: ':8080'\ndevices: []\n",
        "config.yaml: listen: unknown key (expected one of: devices, device, domain)",
        id="unknown-top-level-key",
    ),
    pytest.param(
        "{}", "config.yaml: devices: missing (a list of devices to expose)", id="no-devices"
    ),
    pytest.param(
        "devices: []", "config.yaml: devices: must list at least one device", id="zero-devices"
    ),
    pytest.param(
        "devices: [{groups: [{paths: [{path: /dev/a}]}]}]",
        "config.yaml: devices[0].name: missing",
        id="missing-name",
    ),
    pytest.param(
        "devices: [{name: '', groups: [{paths: [{path: /dev/a}]}]}]",
        "config.yaml: devices[0].name: must not be empty",
        id="empty-name",
    ),
    pytest.param(
        "devices: [{name: Serial Ports, groups: [{paths: [{path: /dev/a}]}]}]",
        "config.yaml: devices[0].name: 'Serial Ports' is not a valid resource name "
        "(letters, digits, '-', '_' and '.', starting and ending with a letter or digit)",
        id="invalid-resource-name",
    ),
    pytest.param(
        "devices: [{name: " + "x" * 64 + ", groups: [{paths: [{path: /dev/a}]}]}]",
        f"config.yaml: devices[0].name: '{'x' * 64}' is longer than 63 characters",
        id="name-too-long",
    ),
    pytest.param(
        "devices: [{name: 5, groups: [{paths: [{path: /dev/a}]}]}]",
        "config.yaml: devices[0].name: expected a string, got a number",
        id="name-wrong-type",
    ),
    pytest.param(
        "devices:\n  - {name: a, groups: [{paths: [{path: /dev/a}]}]}\n"
        "  - {name: a, groups: [{paths: [{path: /dev/b}]}]}\n",
        "config.yaml: devices[1].name: 'a' is already used by devices[0]",
        id="duplicate-name",
    ),
    pytest.param(
        "devices: [{name: a, groups: []}]",
        "config.yaml: devices[0].groups: must list at least one group",
        id="no-groups",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{count: 2}]}]",
        "config.yaml: devices[0].groups[0]: a group needs one of paths, usb or udev",
        id="group-without-kind",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{paths: [{path: /dev/a}], usb: [{vendor: '1', "
        "product: '2'}]}]}]",
        "config.yaml: devices[0].groups[0]: a group has one of paths, usb or udev, "
        "not paths and usb",
        id="group-with-two-kinds",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{paths: [{path: /dev/a}], count: -1}]}]",
        "config.yaml: devices[0].groups[0].count: must not be negative, got -1",
        id="negative-count",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{paths: [{path: /dev/a}], count: '2'}]}]",
        "config.yaml: devices[0].groups[0].count: expected a whole number, got a string",
        id="count-wrong-type",
    ),
    pytest.param(
        serial("{path: /dev/a, permissions: rwx}"),
        "config.yaml: devices[0].groups[0].paths[0].permissions: 'rwx' has letters "
        "other than r, w, m",
        id="bad-permissions",
    ),
    pytest.param(
        serial("{path: /dev/a, permissions: ''}"),
        "config.yaml: devices[0].groups[0].paths[0].permissions: must not be empty "
        "(use letters from r, w, m)",
        id="empty-permissions",
    ),
    pytest.param(
        serial("{path: dev/ttyUSB0}"),
        "config.yaml: devices[0].groups[0].paths[0].path: 'dev/ttyUSB0' is not an absolute path",
        id="relative-path",
    ),
    pytest.param(
        serial("{path: /dev/../etc/shadow}"),
        "config.yaml: devices[0].groups[0].paths[0].path: '/dev/../etc/shadow' "
        "must not contain '..'",
        id="dotdot-path",
    ),
    pytest.param(
        serial("{path: /dev/a, mountPath: /dev/b*}"),
        "config.yaml: devices[0].groups[0].paths[0].mountPath: '/dev/b*' must not contain "
        "glob characters (*, ?, [)",
        id="glob-in-mount-path",
    ),
    pytest.param(
        serial("{path: /dev/a, mountPath: /opt/a}"),
        "config.yaml: devices[0].groups[0].paths[0].mountPath: '/opt/a' would put a device node "
        "outside /dev in the container; set allowMountPathOutsideDev: true on this path "
        "if that is intended",
        id="device-mount-path-outside-dev",
    ),
    pytest.param(
        serial("{path: /opt/a}"),
        "config.yaml: devices[0].groups[0].paths[0].path: '/opt/a' would put a device node "
        "outside /dev in the container; set allowMountPathOutsideDev: true on this path "
        "if that is intended",
        id="device-path-outside-dev",
    ),
    pytest.param(
        serial("{path: /dev/a, type: device}"),
        "config.yaml: devices[0].groups[0].paths[0].type: 'device' is not Device or Mount",
        id="bad-type",
    ),
    pytest.param(
        serial("{path: /dev/a, readOnly: 'yes'}"),
        "config.yaml: devices[0].groups[0].paths[0].readOnly: expected true or false, got a string",
        id="bool-wrong-type",
    ),
    pytest.param(
        serial("{path: /dev/a, mountpath: /dev/b}"),
        "config.yaml: devices[0].groups[0].paths[0].mountpath: unknown key (expected one of: path, "
        "mountPath, permissions, readOnly, type, limit, optional, allowMountPathOutsideDev, "
        "allowHostPathOutsideDev)",
        id="unknown-path-key",
    ),
    pytest.param(
        serial("{mountPath: /dev/b}"),
        "config.yaml: devices[0].groups[0].paths[0].path: missing",
        id="path-missing",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{usb: [{vendor: xyz, product: '1'}]}]}]",
        "config.yaml: devices[0].groups[0].usb[0].vendor: 'xyz' is not a USB ID "
        '(1 to 4 hex digits, e.g. "1a86")',
        id="bad-usb-id",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{usb: [{vendor: 1209, product: '1'}]}]}]",
        "config.yaml: devices[0].groups[0].usb[0].vendor: quote USB IDs so YAML keeps their "
        'hex digits ("1209")',
        id="unquoted-usb-id",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{usb: [{vendor: '1a86'}]}]}]",
        "config.yaml: devices[0].groups[0].usb[0].product: missing",
        id="usb-product-missing",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{udev: [{permissions: rw}]}]}]",
        "config.yaml: devices[0].groups[0].udev[0]: needs at least one of subsystem, kernel, "
        "properties or attributes",
        id="udev-matches-everything",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{udev: [{subsystem: tty, mountPath: /dev/serial0}]}]}]",
        "config.yaml: devices[0].groups[0].udev[0].mountPath: '/dev/serial0' must end in '/': "
        "a udev matcher may find several nodes, each keeps its file name in that directory",
        id="udev-mount-path-not-a-directory",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{udev: [{subsystem: tty, attributes: {idVendor: [1]}}]}]}]",
        "config.yaml: devices[0].groups[0].udev[0].attributes.idVendor: expected a string, "
        "got a list",
        id="udev-attribute-wrong-type",
    ),
    pytest.param(
        "devices: [{name: a, groups: [{udev: [{subsystem: tty, tag: x}]}]}]",
        "config.yaml: devices[0].groups[0].udev[0].tag: unknown key (expected one of: subsystem, "
        "kernel, properties, attributes, permissions, mountPath, optional)",
        id="udev-unknown-key",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_configs_name_file_field_and_reason(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "config.yaml")
    assert str(caught.value).startswith(message)
    assert caught.value.source == "config.yaml"


def test_load_config_reads_the_file(write_config: WriteConfig) -> None:
    path = write_config(
        """
        devices:
          - name: kvm
            groups: [{count: 100, paths: [{path: /dev/kvm}]}]
        """
    )
    config = load_config(path)
    assert config.source == str(path)
    assert config.devices[0].groups[0].count == 100


def test_load_config_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value) == f"{missing}: cannot read the file: No such file or directory"


def test_examples_are_valid() -> None:
    examples = sorted(REPO_ROOT.joinpath("examples", "generic").glob("*.yaml"))
    assert examples, "examples/generic has example configs"
    for example in examples:
        load_config(example)
