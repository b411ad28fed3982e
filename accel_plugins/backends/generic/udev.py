"""The one module that talks to libudev (through pyudev).

Enumeration goes through a pyudev Context of its own; the monitor in
monitor.py uses another, because libudev objects must not be shared between
threads and scans run in a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyudev

from accel_plugins.backends.generic.config import UdevMatcher
from accel_plugins.backends.generic.matchers import AttributeSource, matches


class _Attributes:
    def __init__(self, device: Any) -> None:
        self._device = device

    def attribute(self, name: str) -> str | None:
        try:
            raw = self._device.attributes.get(name)
        except (OSError, KeyError, UnicodeDecodeError):
            return None
        if raw is None:
            return None
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        return text.strip()


class PyudevDevice:
    """A pyudev device seen through the matchers' view."""

    def __init__(self, device: Any) -> None:
        self._device = device

    @property
    def sys_name(self) -> str:
        return str(self._device.sys_name)

    @property
    def sys_path(self) -> str:
        return str(self._device.sys_path)

    @property
    def subsystem(self) -> str:
        return str(self._device.subsystem or "")

    @property
    def device_node(self) -> str | None:
        node = self._device.device_node
        return str(node) if node else None

    @property
    def properties(self) -> Mapping[str, str]:
        return {str(k): str(v) for k, v in self._device.properties.items()}

    def lineage(self) -> Iterable[AttributeSource]:
        yield _Attributes(self._device)
        for ancestor in self._device.ancestors:
            yield _Attributes(ancestor)


class UdevEnumerator:
    """Lists device nodes udev knows that satisfy a matcher."""

    def __init__(self) -> None:
        self._context = pyudev.Context()

    def devices(self, matcher: UdevMatcher) -> Iterator[PyudevDevice]:
        listing = self._context.list_devices()
        # libudev filters by subsystem itself; globs we check afterwards.
        if matcher.subsystem and not any(c in matcher.subsystem for c in "*?["):
            listing = listing.match_subsystem(matcher.subsystem)
        for device in listing:
            view = PyudevDevice(device)
            if matches(matcher, view):
                yield view

    def nodes(self, matcher: UdevMatcher) -> list[str]:
        """Sorted device node paths (host view, e.g. /dev/snd/pcmC0D0p)."""
        return sorted({d.device_node for d in self.devices(matcher) if d.device_node})
