"""The plugin's view of the MPS control daemons: which MPS resources are ready now.

NVIDIA's plugin asks its daemon once, at start (``waitForDaemon``), and never
again. Here readiness follows the daemon's files (:mod:`mps_root`): inotify on
the root (where ``.ready`` comes and goes whenever a daemon starts or stops) and
on each resource's directory (its ``.started``), so a control program that dies
turns its replicas Unhealthy at once and Healthy again when it is back.

Files outlive a daemon killed with SIGKILL, so a resource is ready only while
its ``.started`` exists *and* a daemon holds the root's life lock
(:mod:`mps_lock`). A lock's death makes no inotify event: it is probed every
:data:`LOCK_POLL_SECONDS` (one ``open``/``flock``/``close``), well inside the
2 s in which issue 26 wants the replicas Unhealthy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from pathlib import Path

from accel_plugins.backends.nvidia.mps.mps_lock import daemon_alive
from accel_plugins.backends.nvidia.mps.mps_root import MpsRoot
from accel_plugins.errors import BackendError
from accel_plugins.util.watch import DirEvent, DirWatcher, InotifyError

log = logging.getLogger(__name__)

LOCK_POLL_SECONDS = 0.5


class MpsReadiness:
    """Tracks ``.started`` of each resource; ``on_change`` runs when any of them flips."""

    def __init__(
        self,
        root: MpsRoot,
        resources: Collection[str],
        on_change: Callable[[], None],
        *,
        lock_poll: float = LOCK_POLL_SECONDS,
    ) -> None:
        self.root = root
        self.resources = tuple(sorted(resources))
        self._on_change = on_change
        self._lock_poll = lock_poll
        self._alive = False
        self._ready = self._now()
        self._watcher: DirWatcher | None = None

    def is_ready(self, resource: str) -> bool:
        return self._ready.get(resource, False)

    def _add_watches(self, watcher: DirWatcher) -> None:
        # A resource's directory appears when its daemon first starts; each event on the
        # root (its .ready follows every start) is a chance to watch it.
        for name in self.resources:
            directory = self.root.resource_dir(name)
            if directory.is_dir():
                try:
                    watcher.add(directory)
                except InotifyError:  # removed meanwhile: the next root event retries
                    continue

    @property
    def daemon_running(self) -> bool:
        """A daemon held the life lock at the last check."""
        return self._alive

    def _now(self) -> dict[str, bool]:
        self._alive = alive = daemon_alive(self.root.path)
        return {name: alive and self.root.is_started(name) for name in self.resources}

    def _recheck(self) -> None:
        now = self._now()
        if now == self._ready:
            return
        for name in self.resources:
            if now[name] != self._ready[name]:
                state = "ready" if now[name] else "not ready"
                log.info("MPS control daemon for %s is %s", name, state)
        self._ready = now
        self._on_change()

    def _on_event(self, _event: DirEvent) -> None:
        if self._watcher is not None:
            self._add_watches(self._watcher)
        self._recheck()

    async def run(self) -> None:
        """Watch until cancelled; BackendError when the root cannot be watched."""
        path: Path = self.root.path
        try:
            if not path.is_dir():  # the chart mounts an existing root read-only
                path.mkdir(parents=True)
            watcher = DirWatcher(self._on_event)
            watcher.add(path)
        except OSError as exc:
            raise BackendError(f"cannot watch the MPS root {path}: {exc}") from exc
        self._watcher = watcher
        try:
            self._add_watches(watcher)
            while True:
                self._recheck()  # what changed before the watches; a daemon's death
                await asyncio.sleep(self._lock_poll)
        finally:
            self._watcher = None
            watcher.close()
