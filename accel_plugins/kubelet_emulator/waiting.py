"""Waiting for the emulator to reach a state: the change signal and what waiters ask for.

Tests and ``--admit`` wait for a condition (a resource connected, N devices healthy)
instead of sleeping: every state change wakes the waiters, which re-check their
condition. A wait that times out says what it waited for and, through the caller,
the state at that moment, so a failing test tells why without a rerun.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from accel_plugins.kubelet_emulator.state import ResourceView


def describe_predicate(predicate: Callable[..., object]) -> str:
    """A readable name for a predicate, its source line for a lambda."""
    name = getattr(predicate, "__qualname__", repr(predicate))
    if name.endswith("<lambda>"):
        with contextlib.suppress(OSError, TypeError):
            return inspect.getsource(predicate).strip()
    return name


class Changes:
    """Wakes everyone waiting when the state changed; each wakeup starts a new generation."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def notify(self) -> None:
        # Waking every waiter and starting a new generation: nothing can be missed
        # because waiters re-check their predicate before awaiting the new event.
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_until(
        self, holds: Callable[[], bool], timeout: float, *, why: Callable[[], str]
    ) -> None:
        """Return once ``holds()``; on timeout raise TimeoutError naming ``why()``.

        ``why`` is called only on timeout: describing a lambda reads its source file.
        """
        try:
            async with asyncio.timeout(timeout):
                while not holds():
                    await self._changed.wait()
        except TimeoutError:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {why()}") from None


@dataclass(frozen=True, slots=True)
class ResourceWanted:
    """A resource connected, reported ``min_updates`` times and (if given) ``allocatable``."""

    resource: str
    allocatable: int | None = None
    min_updates: int = 1

    def met(self, resources: Mapping[str, ResourceView]) -> bool:
        view = resources.get(self.resource)
        return (
            view is not None
            and view.connected
            and view.updates >= self.min_updates
            and (self.allocatable is None or view.allocatable == self.allocatable)
        )

    def __str__(self) -> str:
        wanted = f"{self.resource} connected with >= {self.min_updates} update(s)"
        if self.allocatable is not None:
            wanted += f" and {self.allocatable} allocatable"
        return wanted
