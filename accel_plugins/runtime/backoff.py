"""The retry pacing of every registration loop, in both modes."""

from __future__ import annotations

from dataclasses import dataclass


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
