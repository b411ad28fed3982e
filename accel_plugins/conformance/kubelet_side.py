"""The kit's kubelet: the emulator's plugin watcher and DRA client, and what registration said.

The driver is found as the kubelet finds it: a socket in the plugins registry,
GetInfo, validation, NotifyRegistrationStatus (``kubelet_emulator.plugin_watcher``).
Each registration of the driver is recorded, so a check can wait for the next
one (after a restart) and read what GetInfo returned. Restarting this side is
the kubelet's restart as the driver sees it: the watcher goes and comes back,
and every socket in the registry is registered again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc

from accel_plugins.kubelet_emulator.dra import DraClient, DraDrivers
from accel_plugins.kubelet_emulator.endpoint import Endpoint
from accel_plugins.kubelet_emulator.plugin_watcher import PluginWatcher
from accel_plugins.kubelet_emulator.registration import RegistrationRefusedError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Registered:
    """What one registration of the driver said (GetInfo), and the kubelet's choice."""

    name: str
    endpoint: str
    versions: tuple[str, ...]
    socket: Path
    service: str


class _RecordingDrivers(DraDrivers):
    def __init__(self, side: KubeletSide) -> None:
        super().__init__(on_change=side.changed)
        self._side = side

    async def register(
        self, name: str, endpoint: str, versions: list[str], socket: Path
    ) -> DraClient:
        try:
            client = await super().register(name, endpoint, versions, socket)
        except RegistrationRefusedError as exc:
            if name == self._side.driver:
                self._side.refusals.append(exc.reason)
                self._side.changed()
            raise
        if name == self._side.driver:
            self._side.registrations.append(
                Registered(name, endpoint, tuple(versions), socket, client.service)
            )
            self._side.changed()
        return client


async def _no_device_plugins(
    name: str, endpoint: str, versions: list[str], socket: Path
) -> Endpoint:
    # The kit checks a DRA driver: a device plugin in the same registry is not its business.
    raise RegistrationRefusedError(grpc.StatusCode.INVALID_ARGUMENT, f"{name} is a device plugin")


async def _nothing(endpoint: Endpoint, socket: Path) -> None:
    return None


class KubeletSide:
    """A plugin watcher on ``registry`` that records the registrations of ``driver``."""

    def __init__(self, registry: Path, driver: str) -> None:
        self.registry = Path(registry)
        self.driver = driver
        self.registrations: list[Registered] = []
        self.refusals: list[str] = []
        self.events: list[str] = []
        self._changed = asyncio.Event()
        self._drivers: _RecordingDrivers | None = None
        self._watcher: PluginWatcher | None = None

    def changed(self) -> None:
        self._changed.set()

    async def start(self) -> None:
        self._drivers = _RecordingDrivers(self)
        self._watcher = PluginWatcher(
            self.registry,
            register=_no_device_plugins,
            deregister=_nothing,
            on_event=self.events.append,
            retry_initial=0.2,
            retry_max=2.0,
            dra=self._drivers,
        )
        await self._watcher.start()

    async def stop(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            await watcher.stop()
        drivers, self._drivers = self._drivers, None
        if drivers is not None:
            await drivers.close()

    async def restart(self) -> None:
        """The kubelet's restart: every registration forgotten, then made again."""
        await self.stop()
        await self.start()

    @property
    def registered(self) -> bool:
        return self._drivers is not None and self.driver in self._drivers.names

    def client(self) -> DraClient:
        """The kubelet's client of the driver now (KeyError when it is not registered)."""
        if self._drivers is None:
            raise KeyError(self.driver)
        return self._drivers.client(self.driver)

    async def wait_registered(self, after: int, timeout: float) -> Registered:
        """The first registration past the ``after``-th; TimeoutError saying what was seen."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.registrations) <= after or not self.registered:
            left = deadline - loop.time()
            if left <= 0:
                seen = "; ".join(self.refusals[-3:] or self.events[-3:]) or "no socket appeared"
                raise TimeoutError(
                    f"{self.driver} did not register in {self.registry} within {timeout:g}s "
                    f"({seen})"
                )
            self._changed.clear()
            # The watcher also retries on its own: look again at least every second.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
        return self.registrations[-1]
