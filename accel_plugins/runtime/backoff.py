"""The retry pacing of every registration loop, in both modes, and the jitter of API retries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# client-go's reflector backs off with jitter 1.0 (a delay d waits between d and 2d), so a
# fleet of nodes whose API server came back does not retry in step.
JITTER = 1.0


def jittered(delay: float, factor: float = JITTER, rng: Callable[[], float] | None = None) -> float:
    """``delay`` stretched by up to ``factor`` of itself, at random."""
    if rng is None:
        import random  # after a failure only: off the start path

        rng = random.random
    return delay * (1 + factor * rng())


@dataclass
class Backoff:
    """Exponential delays for retries: fast at first, never a busy loop."""

    initial: float = 0.1
    maximum: float = 5.0
    factor: float = 2.0
    _next: float = 0.0

    def __post_init__(self) -> None:
        self._next = self.initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * self.factor, self.maximum)
        return delay

    def reset(self) -> None:
        self._next = self.initial
