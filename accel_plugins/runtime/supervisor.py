"""One supervisor of the backend, feeding either mode.

It builds the backend from its factory, runs it, checks every tree it publishes
and hands the good ones to the mode. A backend that cannot be built, crashes or
returns is rebuilt after a delay that doubles up to a cap (a run that lasted long
enough resets it); meanwhile the mode is told the backend died, so it can mark
every device Unhealthy rather than keep promising health nobody watches. A
reload (SIGHUP, a changed configuration file) builds a new backend first and keeps
the running one when that fails. An invalid tree is fatal: the mode stops serving
rather than serve something half right.

The device-plugin manager and the DRA driver each implement :class:`BackendEvents`;
the supervisor is all they share of running a backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from accel_plugins.errors import AccelPluginsError, InvalidSnapshotError
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.command import BackendFactory
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.runtime.backoff import Backoff
from accel_plugins.runtime.snapshot import check_snapshot

log = logging.getLogger(__name__)

# Where the kubelet's plugin watcher looks for registration sockets (both modes offer theirs).
DEFAULT_PLUGINS_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeSettings:
    """What both modes set alike: supervision, hook deadline, retry pacing, socket checks,
    and where the kubelet's plugin watcher looks for registration sockets.

    The device plugin's ``ManagerSettings`` and the DRA driver's ``DraSettings`` extend it.
    """

    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    # Socket checks: every check_interval without inotify (exotic filesystems);
    # with it, only check_interval after a socket failed to serve.
    check_interval: float = 5.0
    # A backend that crashes, returns, or cannot be built is rebuilt after
    # backend_restart_delay, doubling up to backend_restart_max; a run that
    # lasted backend_stable_after resets the delay.
    backend_restart_delay: float = 1.0
    backend_restart_max: float = 30.0
    backend_stable_after: float = 60.0
    # Deadline of each backend hook call (allocate, preferred allocation, pre-start, ...).
    hook_timeout: float = 10.0
    # The plugin watcher's directory: a DRA driver's registration socket, and a device
    # plugin's with registration="plugin-watcher".
    plugins_registry_dir: Path = DEFAULT_PLUGINS_REGISTRY_DIR


class BackendEvents(Protocol):
    """What the supervisor tells the mode it feeds, on the event loop."""

    def backend_started(self, backend: Backend) -> None:
        """``backend`` runs now (the first, a rebuilt or a reloaded one)."""

    def tree_published(self, tree: DeviceTree) -> None:
        """The running backend published ``tree``, checked against the previous one."""

    def backend_died(self) -> None:
        """The backend crashed, returned or could not be built; a new one comes later."""

    def snapshot_invalid(self, error: InvalidSnapshotError) -> None:
        """The backend published a tree the kubelet cannot take: stop serving."""


class Supervisor:
    """Runs the backend that ``factory`` builds until cancelled (see the module docstring)."""

    def __init__(
        self, factory: BackendFactory, settings: RuntimeSettings, events: BackendEvents
    ) -> None:
        self._factory = factory
        self._settings = settings
        self._events = events
        self._backend: Backend | None = None
        self._last: DeviceTree = {}
        self._next: Backend | None = None  # a reloaded backend, to run next
        self._task: asyncio.Task[None] | None = None  # the running backend's run()
        self._wake = asyncio.Event()
        self._fatal = False

    @property
    def backend(self) -> Backend | None:
        """The backend running now (None before the first and between restarts)."""
        return self._backend

    def reload(self) -> str | None:
        """Build a new backend and run it in place of the running one.

        Returns None on success, else why it failed (the running backend is kept).
        """
        try:
            backend = self._factory()
        except Exception as exc:
            log.error(
                "reload failed, keeping the running configuration: %s",
                exc,
                exc_info=not isinstance(exc, AccelPluginsError),
            )
            return str(exc)
        log.info("configuration reloaded")
        self._next = backend
        if self._task is not None:
            self._task.cancel()
        self._wake.set()
        return None

    async def run(self) -> None:
        """Run, rebuild and replace the backend until cancelled."""
        loop = asyncio.get_running_loop()
        settings = self._settings
        backoff = Backoff(settings.backend_restart_delay, settings.backend_restart_max)
        try:
            while True:
                started = loop.time()
                backend, self._next = self._next, None
                if backend is None:
                    backend = self._build()
                if backend is not None and await self._run(backend):
                    continue  # replaced by a reload: no crash, no delay
                self._backend = None
                self._events.backend_died()
                if loop.time() - started >= settings.backend_stable_after:
                    backoff.reset()
                if self._next is not None:
                    continue
                delay = backoff.next_delay()
                log.info("rebuilding the backend in %.1fs", delay)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)  # a reload ends the wait
        finally:
            await self._cancel()
            self._backend = None

    def _build(self) -> Backend | None:
        try:
            return self._factory()
        except Exception as exc:
            # Vendor code: whatever it raises, the mode and its other state live on.
            log.error(
                "cannot build the backend: %s", exc, exc_info=not isinstance(exc, AccelPluginsError)
            )
            return None

    async def _run(self, backend: Backend) -> bool:
        """Run ``backend`` until it ends; True when a reload replaced it."""
        self._backend = backend
        self._events.backend_started(backend)
        task = self._task = asyncio.create_task(
            backend.run(functools.partial(self._publish, backend)), name="backend"
        )
        await asyncio.wait({task})
        self._task = None
        if task.cancelled():
            return self._next is not None
        exc = task.exception()
        if exc is not None:
            log.error(
                "backend crashed: %r; devices marked unhealthy until it is back", exc, exc_info=exc
            )
        else:
            log.error("backend stopped unexpectedly; restarting it")
        return False

    def _publish(self, backend: Backend, tree: DeviceTree) -> None:
        if backend is not self._backend or self._fatal:
            return  # late snapshots of a replaced backend are dropped
        try:
            check_snapshot(tree, self._last)
        except InvalidSnapshotError as exc:
            self._fatal = True
            self._events.snapshot_invalid(exc)
            return
        self._last = tree
        self._events.tree_published(tree)

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
