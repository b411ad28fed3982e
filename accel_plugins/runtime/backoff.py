"""The retry pacing of every registration loop, in both modes, and the jitter of API retries."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# client-go's reflector backs off with jitter 1.0 (a delay d waits between d and 2d), so a
# fleet of nodes whose API server came back does not retry in step.
JITTER = 1.0


_process_jitter = JITTER


def set_process_jitter(factor: float) -> None:
    """The factor of every API retry in this process (``--kube-api-retry-jitter``): 0 puts
    a fleet's retries in step, which only a benchmark of what jitter saves wants."""
    global _process_jitter
    if factor < 0:
        raise ValueError(f"a jitter factor is 0 or more, not {factor:g}")
    _process_jitter = factor


def jittered(
    delay: float, factor: float | None = None, rng: Callable[[], float] | None = None
) -> float:
    """``delay`` stretched by up to ``factor`` of itself (default: the process's), at random."""
    if factor is None:
        factor = _process_jitter
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
