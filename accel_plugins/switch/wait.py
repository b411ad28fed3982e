"""Waiting until the other mode holds and advertises nothing, logged and on /metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from accel_plugins.runtime.backoff import jittered
from accel_plugins.switch.model import Blockers, Mode

log = logging.getLogger(__name__)

POLL_INTERVAL = 2.0  # seconds between reads: PodResources and the checkpoint have no watch


class Side(Protocol):
    """The other mode's state on this node (:mod:`.probes`)."""

    async def read(self) -> Blockers: ...


@dataclass
class HandoverState:
    """The wait as it stands; read at scrape time (:mod:`.metrics`)."""

    mode: Mode
    blockers: Blockers = field(default_factory=Blockers)
    waiting: bool = False
    waited: float = 0.0  # seconds, once done

    def waiting_line(self) -> str:
        """What /healthz notes and /readyz reports while the plugin waits."""
        seen = "not read yet" if self.blockers.clear else self.blockers.describe()
        return f"waiting to serve as {self.mode}: the other mode still holds this node ({seen})"


async def await_handover(
    side: Side,
    state: HandoverState,
    *,
    interval: float = POLL_INTERVAL,
    clock: Callable[[], float] = time.monotonic,
) -> Blockers:
    """Return once ``side`` reads clear; logs each change of what blocks us.

    A read that fails (no kubelet answering yet) counts as not clear: publishing
    before we know is what the switch must never do.
    """
    start = clock()
    state.waiting = True
    last = ""
    try:
        while True:
            try:
                blockers = await side.read()
            except Exception as exc:  # any failure: wait and read again
                blockers = Blockers(advertised=(f"unknown ({type(exc).__name__}: {exc})",))
            state.blockers = blockers
            if blockers.clear:
                break
            text = blockers.describe()
            if text != last:
                log.info(
                    "kubelet-api switch to %s: waiting for the other mode: %s", state.mode, text
                )
                last = text
            await asyncio.sleep(jittered(interval, 0.5))  # nodes of a fleet out of step
    finally:
        state.waiting = False
        state.waited = clock() - start
    if last:
        log.info(
            "kubelet-api switch to %s: the other mode is gone after %.1f s",
            state.mode,
            state.waited,
        )
    return blockers


@dataclass(frozen=True)
class Handover:
    """What a starting plugin waits on (the other mode's side) and its exported state."""

    side: Side
    state: HandoverState
