"""Enumeration through libudev (pyudev); with monitor.py the only pyudev users.

Enumeration goes through a pyudev Context of its own; the monitor in
monitor.py uses another, because libudev objects must not be shared between
threads and scans run in a worker thread. pyudev errors leave this module as
OSError.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyudev

from accel_plugins.backends.generic.config import UdevMatcher
from accel_plugins.backends.generic.matchers import AttributeSource, matches

_ATTEMPTS = 3


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
        self._properties: Mapping[str, str] | None = None

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
        if self._properties is None:  # read once: matching asks key by key
            self._properties = {str(k): str(v) for k, v in self._device.properties.items()}
        return self._properties

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
        """Sorted device node paths (host view, e.g. /dev/snd/pcmC0D0p).

        A device removed while being listed makes pyudev raise; listing again
        gives the settled picture, so that is tried a few times.
        """
        problem: Exception | None = None
        for _ in range(_ATTEMPTS):
            try:
                return sorted({d.device_node for d in self.devices(matcher) if d.device_node})
            except pyudev.DeviceError as exc:
                problem = exc
        raise OSError(f"udev devices kept changing while listed: {problem}")
