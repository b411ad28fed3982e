"""udev matchers over plain device records: subsystem, kernel glob, properties, ATTRS."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pytest

from accel_plugins.backends.generic.config import UdevMatcher
from accel_plugins.backends.generic.matchers import AttributeSource, matches


@dataclass
class Attrs:
    values: dict[str, str]

    def attribute(self, name: str) -> str | None:
        return self.values.get(name)


@dataclass
class Record:
    sys_name: str
    subsystem: str
    device_node: str | None
    properties: Mapping[str, str] = field(default_factory=dict)
    chain: list[dict[str, str]] = field(default_factory=list)

    def lineage(self) -> Iterable[AttributeSource]:
        return [Attrs(a) for a in self.chain]


PCM = Record(
    "pcmC1D0c",
    "sound",
    "/dev/snd/pcmC1D0c",
    {"ID_BUS": "usb", "ID_MODEL": "USB_Audio"},
    [
        {"pcm_class": "generic"},  # the pcm device itself
        {"id": "Device"},  # the card
        {"bInterfaceClass": "01"},  # the USB interface
        {"idVendor": "0d8c", "idProduct": "0014"},  # the USB device
        {"idVendor": "1d6b", "idProduct": "0002"},  # the root hub
    ],
)

CASES = [
    pytest.param(UdevMatcher(subsystem="sound"), True, id="subsystem"),
    pytest.param(UdevMatcher(subsystem="tty"), False, id="other-subsystem"),
    pytest.param(UdevMatcher(subsystem="so*"), True, id="subsystem-glob"),
    pytest.param(UdevMatcher(kernel="pcmC*c"), True, id="kernel-glob"),
    pytest.param(UdevMatcher(kernel="pcmC*p"), False, id="kernel-glob-miss"),
    pytest.param(UdevMatcher(properties={"ID_MODEL": "USB_*"}), True, id="property-glob"),
    pytest.param(UdevMatcher(properties={"ID_SERIAL": "*"}), False, id="property-absent"),
    pytest.param(
        UdevMatcher(attributes={"idVendor": "0d8c", "idProduct": "0014"}),
        True,
        id="attributes-of-an-ancestor",
    ),
    pytest.param(UdevMatcher(attributes={"pcm_class": "generic"}), True, id="own-attribute"),
    pytest.param(
        UdevMatcher(attributes={"idVendor": "0d8c", "idProduct": "0002"}),
        False,
        id="attributes-must-hold-on-one-device",
    ),
    pytest.param(
        UdevMatcher(subsystem="sound", kernel="pcm*", attributes={"idVendor": "1d6b"}),
        True,
        id="everything-together",
    ),
]


@pytest.mark.parametrize(("matcher", "expected"), CASES)
def test_matchers(matcher: UdevMatcher, expected: bool) -> None:
    assert matches(matcher, PCM) is expected


def test_devices_without_a_node_never_match() -> None:
    card = Record("card1", "sound", None)
    assert not matches(UdevMatcher(subsystem="sound"), card)
