"""squat's config file as its users write it: the list under ``device`` or ``devices``;
and squat's USB discovery table.

squat's config.go reads the key ``device`` and registers ``devices`` as its
alias (viper.RegisterAlias), so a squat config file may use either; ours reads
both, and the same list under each gives the same config.
"""

from __future__ import annotations

import pytest
import yaml

from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.discovery import Discovery, device_id
from accel_plugins.backends.generic.hostfs import HostPaths
from accel_plugins.errors import ConfigError
from tests.fixtures.generic import FakeHost
from tests.support.squat import squat_config_text


def test_squats_device_key_reads_like_devices() -> None:
    text = squat_config_text()
    assert text.startswith("devices:\n")
    singular = parse_config("device:\n" + text.removeprefix("devices:\n"), "squat.yaml")
    assert singular.devices == parse_config(text).devices
    assert [d.name for d in singular.devices] == ["serial", "video", "fuse", "audio", "capture"]


CASES = [
    pytest.param("{device: [], devices: []}", "has both devices and device", id="both"),
    pytest.param("device: []", "device: must list at least one device", id="empty"),
    pytest.param(
        "device: [{name: a, groups: [{paths: [{path: /dev/a}]}]}, {name: a, groups: []}]",
        r"squat\.yaml: device\[1\]\.groups: must list at least one group",
        id="field-path-names-the-key",
    ),
]


@pytest.mark.parametrize(("text", "message"), CASES)
def test_errors_name_the_key_the_file_uses(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text, "squat.yaml")


# squat's deviceplugin/usb_test.go TestDiscoverUSB (commit 179b1fe): (case, usb entry,
# sysfs devices (name, vendor, product, bus, address, serial), the device's specs).
USB = ("1050", "0407")
USB_CASES = [
    pytest.param(
        {"vendor": "1050", "product": "0407"},
        [("3-4", *USB, 3, 22, "51")],
        ["/dev/bus/usb/003/022"],
        id="simple",
    ),
    pytest.param(
        {"vendor": "1050", "product": "0407"},
        [("3-4", *USB, 3, 22, "")],
        ["/dev/bus/usb/003/022"],
        id="no-serial",
    ),
    pytest.param(
        {"vendor": "1050", "product": "0407", "serial": "52"},
        [("3-4", *USB, 3, 22, "51"), ("4-4", *USB, 4, 25, "52")],
        ["/dev/bus/usb/004/025"],
        id="serial",
    ),
]


@pytest.mark.parametrize(("usb", "present", "nodes"), USB_CASES)
def test_squat_discover_usb_table(
    fake_host: FakeHost,
    usb: dict[str, str],
    present: list[tuple[str, str, str, int, int, str]],
    nodes: list[str],
) -> None:
    for name, vendor, product, bus, address, serial in present:
        fake_host.usb_device(name, vendor, product, bus=bus, address=address, serial=serial)
    config = parse_config(yaml.safe_dump({"device": [{"name": "u", "groups": [{"usb": [usb]}]}]}))
    (device,) = Discovery(config, HostPaths(fake_host.dev, fake_host.sys)).scan()["u"]
    assert [(n.host_path, n.container_path) for n in device.nodes] == [(n, n) for n in nodes]
    assert device.id == device_id(0, nodes)
