"""Does a udev device satisfy a ``udev`` matcher? Pure logic over a small view.

The view is a Protocol so the same rules run over pyudev devices (udev.py)
and over plain records in table tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Protocol

from accel_plugins.backends.generic.config import UdevMatcher


class AttributeSource(Protocol):
    """One device in a node's ancestry: its sysfs attributes, read on demand."""

    def attribute(self, name: str) -> str | None: ...


class UdevDeviceView(Protocol):
    @property
    def sys_name(self) -> str: ...

    @property
    def subsystem(self) -> str: ...

    @property
    def device_node(self) -> str | None: ...

    @property
    def properties(self) -> Mapping[str, str]: ...

    def lineage(self) -> Iterable[AttributeSource]:
        """The device itself, then its parent, grandparent, ... up to the root."""
        ...


def matches(matcher: UdevMatcher, device: UdevDeviceView) -> bool:
    """True when ``device`` has a node and every key of ``matcher`` holds."""
    if not device.device_node:
        return False
    if matcher.subsystem and not fnmatchcase(device.subsystem, matcher.subsystem):
        return False
    if matcher.kernel and not fnmatchcase(device.sys_name, matcher.kernel):
        return False
    for key, pattern in matcher.properties.items():
        value = device.properties.get(key)
        if value is None or not fnmatchcase(value, pattern):
            return False
    return not matcher.attributes or _attributes_match(matcher.attributes, device.lineage())


def _attributes_match(wanted: Mapping[str, str], lineage: Iterable[AttributeSource]) -> bool:
    # As udev's ATTRS: all keys must hold on one device of the chain, so
    # idVendor and idProduct cannot come from two different USB devices.
    for source in lineage:
        for key, pattern in wanted.items():
            value = source.attribute(key)
            if value is None or not fnmatchcase(value, pattern):
                break
        else:
            return True
    return False
