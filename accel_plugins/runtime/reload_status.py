"""The outcome of configuration reloads, for metrics and /healthz.

A reload that fails keeps the previous configuration serving, so nothing
else shows it: the manager keeps one :class:`ReloadStatus`, replaced whole
after every attempt (collectors read it from another thread).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReloadStatus:
    """Counts of reload attempts and what the last one did.

    ``last_error`` is the reason the last attempt failed ("" after a success
    or before any attempt); ``last_success`` is the wall-clock time of the
    last good load, the start counting as one.
    """

    successes: int = 0
    failures: int = 0
    last_error: str = ""
    last_success: float = 0.0

    @property
    def failing(self) -> bool:
        """True while the configuration on disk is not the one being served."""
        return bool(self.last_error)

    def succeeded(self, when: float) -> ReloadStatus:
        return dataclasses.replace(
            self, successes=self.successes + 1, last_error="", last_success=when
        )

    def failed(self, reason: str) -> ReloadStatus:
        return dataclasses.replace(self, failures=self.failures + 1, last_error=reason)

    def note(self) -> str:
        """The /healthz line while failing, else ""."""
        if not self.failing:
            return ""
        return f"configuration: reload failed, still serving the previous one: {self.last_error}"
