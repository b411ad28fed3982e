"""Retrier: one background task that repeats an attempt, with backoff, until a goal is met.

A failed ResourceSlice write must not raise into the kubelet side, and an API
outage must not become a busy loop; so the publisher hands its attempt to a
Retrier, which sleeps 1 s doubling to 30 s between tries, each stretched by a
random jitter of up to as much again (so the nodes of a fleet do not retry in
step after an API server comes back), and stops once the goal holds. At most
one such task runs: a second start while one runs only lets the running one
carry on (it always tries the newest state). The same jittered doubling paces
the publisher's watch restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from accel_plugins.runtime.backoff import jittered

BACKOFF_START = 1.0
BACKOFF_MAX = 30.0


def doubled(delay: float) -> float:
    """The delay after ``delay``: twice as long, from BACKOFF_START (after 0) to BACKOFF_MAX."""
    return min(max(delay * 2, BACKOFF_START), BACKOFF_MAX)


class Retrier:
    """Runs ``attempt`` (True: it succeeded) until ``done`` holds, sleeping with ``sleep``."""

    def __init__(
        self,
        attempt: Callable[[], Awaitable[bool]],
        done: Callable[[], bool],
        sleep: Callable[[float], Awaitable[None]],
        *,
        name: str,
    ) -> None:
        self._attempt = attempt
        self._done = done
        self._sleep = sleep
        self._name = name
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, first_delay: float) -> None:
        """Start retrying after ``first_delay`` (0: at once), unless already retrying."""
        if not self.running:
            self._task = asyncio.create_task(self._loop(first_delay), name=self._name)

    async def wait(self) -> None:
        """Return once no retry is running (shielded: a cancelled waiter leaves it running)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    async def _loop(self, delay: float) -> None:
        while not self._done():
            if delay:
                await self._sleep(jittered(delay))
            if await self._attempt():
                return
            delay = doubled(delay)
