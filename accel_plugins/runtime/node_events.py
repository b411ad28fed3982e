"""Health changes as Kubernetes Events on the Node: what ``kubectl describe node`` shows.

A :class:`NodeEventSink` is a :class:`~accel_plugins.runtime.health_changes.HealthSink`:
each change becomes one Event (``DeviceUnhealthy``, a Warning, with the reason;
``DeviceHealthy``, Normal, when it recovers), posted off the event loop's
critical path by :meth:`NodeEventSink.run` through an :class:`EventPoster`
(the API side, ``accel_plugins.kube.events``, which needs lightkube). Events
are rate-limited per node: one per device per change already (the watch only
reports changes), and at most ``per_minute`` in any minute, so a flapping
device cannot flood the API server; what is dropped is counted and logged.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from accel_plugins.runtime.health_changes import HealthChange

log = logging.getLogger(__name__)

UNHEALTHY_REASON = "DeviceUnhealthy"
HEALTHY_REASON = "DeviceHealthy"
DEFAULT_PER_MINUTE = 30
# Changes waiting to be posted; past this (the API server is slow or gone), new ones drop.
QUEUE_LIMIT = 256


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """One Event about the node: its reason, type (Warning/Normal) and message."""

    reason: str
    type: str
    message: str


def node_event(change: HealthChange) -> NodeEvent:
    """The Event for one change: names the resource, the device and the reason."""
    if change.healthy:
        return NodeEvent(
            HEALTHY_REASON, "Normal", f"{change.resource} device {change.device} is Healthy again"
        )
    why = str(change.reason) if change.reason is not None else "no reason given"
    return NodeEvent(
        UNHEALTHY_REASON,
        "Warning",
        f"{change.resource} device {change.device} is Unhealthy: {why}",
    )


class EventPoster(Protocol):
    """Writes one Event on the node (raises on failure; the sink logs it)."""

    async def post(self, event: NodeEvent) -> None: ...


class NodeEventSink:
    """Queues an Event per health change and posts them, at most ``per_minute`` a minute."""

    def __init__(
        self,
        poster: EventPoster,
        *,
        per_minute: int = DEFAULT_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._poster = poster
        self._per_minute = per_minute
        self._clock = clock
        self._sent: collections.deque[float] = collections.deque()
        self._queue: asyncio.Queue[NodeEvent] = asyncio.Queue(QUEUE_LIMIT)
        self.dropped = 0
        """Events not posted: over the rate limit, the queue full, or the post failed."""
        self._failing = False

    def health_changed(self, changes: Sequence[HealthChange]) -> None:
        for change in changes:
            event = node_event(change)
            if not self._allowed():
                self._drop(f"more than {self._per_minute} a minute", event)
                continue
            try:
                self._queue.put_nowait(event)
            except asyncio.QueueFull:
                self._drop("too many waiting to be posted", event)

    def _allowed(self) -> bool:
        now = self._clock()
        while self._sent and now - self._sent[0] >= 60.0:
            self._sent.popleft()
        if len(self._sent) >= self._per_minute:
            return False
        self._sent.append(now)
        return True

    def _drop(self, why: str, event: NodeEvent) -> None:
        self.dropped += 1
        log.warning("node Event not posted (%s): %s", why, event.message)

    async def idle(self) -> None:
        """Return once every queued Event has been posted (or given up)."""
        await self._queue.join()

    async def run(self) -> None:
        """Post queued Events until cancelled; a failing post is logged, once per outage."""
        while True:
            event = await self._queue.get()
            try:
                await self._poster.post(event)
            except Exception as exc:
                self.dropped += 1
                if not self._failing:
                    log.warning("cannot post node Events: %s (%s)", exc, event.message)
                self._failing = True
            else:
                if self._failing:
                    log.info("posting node Events works again")
                self._failing = False
            finally:
                self._queue.task_done()
