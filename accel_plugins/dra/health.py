"""Device health for the kubelet's DRAResourceHealth stream, from the backend's trees.

The same events as ListAndWatch: a health change is a new tree with the device
Unhealthy. Each tree updates the states here; a watcher gets the complete
list at once, after every change, and again every ``refresh`` seconds even
without one, because the kubelet counts a device whose last update is older
than its health timeout (30 s by default) as Unknown. Every list is stamped
with the time it is sent: the backend's latest tree is the health as of now.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from accel_plugins.dra.model import NamedDevice
from accel_plugins.plugin.device import Device

# The kubelet keeps at most this many characters of a message (and cuts longer ones
# itself): sent whole up to it, so the cut is ours and says where (dra-health v1 api.proto).
MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class DeviceHealthState:
    """One device's health as the stream reports it; ``message`` says why when Unhealthy."""

    pool: str
    device: str
    healthy: bool
    message: str = ""


def health_message(device: Device) -> str:
    """The device's reason as the stream's ``message`` (empty while Healthy)."""
    if device.healthy or device.reason is None:
        return ""
    text = str(device.reason)
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


class HealthFeed:
    """The health of the driver's devices now, and a way to await the next change."""

    def __init__(
        self, pool: str, *, refresh: float = 10.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.pool = pool
        self.refresh = refresh
        self._clock = clock
        self._states: dict[str, DeviceHealthState] = {}
        self._changed = asyncio.Event()
        self._closed = False

    @property
    def timeout_seconds(self) -> int:
        """What the stream tells the kubelet to wait for the next list: three refreshes,
        so one late list does not turn a device Unknown."""
        return max(1, math.ceil(3 * self.refresh))

    @property
    def states(self) -> tuple[DeviceHealthState, ...]:
        return tuple(self._states[name] for name in sorted(self._states))

    def update(self, devices: Mapping[str, NamedDevice]) -> bool:
        """Take a new tree's devices; True (and watchers woken) when anything changed."""
        states = {
            name: DeviceHealthState(
                self.pool, name, named.device.healthy, health_message(named.device)
            )
            for name, named in devices.items()
        }
        if states == self._states:
            return False
        self._states = states
        self._wake()
        return True

    def close(self) -> None:
        """End every watch (the server is stopping)."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def watch(self) -> AsyncIterator[tuple[int, tuple[DeviceHealthState, ...]]]:
        """(Unix seconds, the full list) now, then after each change or ``refresh``
        seconds (the same list again, so it does not go stale); ends on close."""
        while not self._closed:
            changed = self._changed
            yield int(self._clock()), self.states
            if self._closed:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), self.refresh)
