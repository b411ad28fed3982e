"""A client-side limit on API requests: a token bucket, as client-go's rest.Config has one.

``qps`` requests a second on average, ``burst`` at once after a quiet spell; a request
beyond waits its turn, in order. Every HTTP request counts (a list page, a watch's
start), as client-go counts them. The defaults: client-go's 5 a second, and the
kubelet's burst of 100 (its --kube-api-burst). A node's plugin makes a few requests
per claim and per device change, so a storm of them (pods starting, a device
flapping) passes at once, while a loop gone wrong is held to 5 a second and cannot
flood the API server from every node of a fleet. The flag names are those the
kubelet and the CSI sidecars use for the same limit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_QPS = 5.0
DEFAULT_BURST = 100


@dataclass(frozen=True)
class RateLimit:
    """``--kube-api-qps`` and ``--kube-api-burst``; qps 0 means no limit."""

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST

    def __post_init__(self) -> None:
        if self.qps < 0 or self.burst < 1:
            raise ValueError(f"qps must be >= 0 and burst >= 1, got {self.qps} and {self.burst}")


_process = [RateLimit()]  # the command line's, set once at start


def set_process_limit(limit: RateLimit) -> None:
    """The limit of every client made after this (the command line sets it once, from
    ``--kube-api-qps`` and ``--kube-api-burst``; importable without lightkube)."""
    _process[0] = limit


def process_limit() -> RateLimit:
    return _process[0]


class TokenBucket:
    """``take()`` returns when a request may go; FIFO among waiters."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._tokens = float(limit.burst)
        self._stamp = clock()
        self._turn = asyncio.Lock()
        self.waited = 0.0  # seconds requests spent waiting, in all

    async def take(self) -> None:
        if not self.limit.qps:
            return
        async with self._turn:
            while True:
                now = self._clock()
                self._tokens = min(
                    float(self.limit.burst), self._tokens + (now - self._stamp) * self.limit.qps
                )
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                pause = (1 - self._tokens) / self.limit.qps
                self.waited += pause
                await asyncio.sleep(pause)
