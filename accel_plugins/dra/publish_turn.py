"""Which of the driver's instances on a node writes its ResourceSlices: the newest.

Two instances publishing at once would "repair" each other's slices whenever
their trees differ (another version, another configuration). So one holds
``slices.lock`` and publishes; an instance that starts asks for the turn by
writing its pod UID to ``slices.owner`` and takes the lock once the holder,
seeing the file name another instance, stops (its slices stay) and lets go.
The instance that gave the turn up takes it back only if the one it gave it to
is gone (its instance lock is free): a new pod that fails leaves the old one
publishing, not nobody. Files are polled, with jitter: a few stat calls a
second, and inotify would not see a peer's death.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from accel_plugins.dra.instances import Instance
from accel_plugins.runtime.backoff import jittered
from accel_plugins.util.flock import FileLock
from accel_plugins.util.fsutil import atomic_write_text

log = logging.getLogger(__name__)

TURN_LOCK = "slices.lock"
OWNER_FILE = "slices.owner"
POLL = 0.25


class PublishTurn:
    """The right of ``instance`` to publish the node's slices of its driver."""

    def __init__(
        self,
        instance: Instance,
        *,
        poll: float = POLL,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.instance = instance
        self._lock = FileLock(instance.plugin_dir / TURN_LOCK)
        self._owner = instance.plugin_dir / OWNER_FILE
        self._poll = poll
        self._sleep = sleep

    @property
    def held(self) -> bool:
        return self._lock.held

    def owner(self) -> str | None:
        """The UID of the instance the turn was last asked for (None: never asked)."""
        try:
            return self._owner.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None

    async def take(self) -> None:
        """Ask for the turn and wait until the holder, if any, has let go of it."""
        atomic_write_text(self._owner, self.instance.uid + "\n", mode=0o600)
        while not self._lock.try_acquire():
            await self._sleep(jittered(self._poll))

    async def lost(self) -> None:
        """Return once a newer instance has asked for the turn."""
        while self.owner() in (self.instance.uid, None):
            await self._sleep(jittered(self._poll))

    def give_up(self) -> None:
        self._lock.release()

    async def orphaned(self) -> None:
        """Return once the instance the turn went to is gone, or it went back to us."""
        while True:
            owner = self.owner()
            if owner is None or owner == self.instance.uid or not self.instance.alive(owner):
                return
            await self._sleep(jittered(self._poll))

    async def run(
        self, publish: Callable[[], Coroutine[Any, Any, None]], pause: Callable[[], Awaitable[None]]
    ) -> None:
        """Run ``publish`` (it loops) while this instance has the turn; when a newer one
        asks for it, cancel it and ``pause`` (stop writing; the slices stay) before letting
        go. Runs until cancelled."""
        driver = self.instance.driver
        while True:
            await self.take()
            log.info("DRA driver %s: publishing the node's slices", driver)
            publishing = asyncio.create_task(publish(), name="slice trees")
            try:
                await self.lost()
            finally:
                publishing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await publishing
            await pause()
            self.give_up()
            log.info("DRA driver %s: a newer instance publishes the slices now", driver)
            await self.orphaned()

    def close(self) -> None:
        self._lock.close()
