"""Wake the backend when devices may have changed: udev events, inotify, a timer.

Three sources feed one flag the backend waits on:

- a udev netlink monitor (pyudev) read on the event loop. With no udevd
  (no /run/udev/control, as in most containers) udev never broadcasts, so
  the monitor listens to the kernel's own uevents instead;
- inotify on the directories the globs look at (node created, removed or
  renamed), which also covers hosts where no uevent reaches us;
- the caller's anchor timeout (a full rescan every few seconds), the safety
  net for anything both miss (attribute changes, lost events).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pyudev

from accel_plugins.plugin.watch import DirEvent, DirWatcher, InotifyError

log = logging.getLogger(__name__)

UDEV_CONTROL = Path("/run/udev/control")


class UdevSource(enum.StrEnum):
    AUTO = "auto"  # udev when udevd runs, else kernel
    UDEV = "udev"
    KERNEL = "kernel"
    OFF = "off"


class Wakeup(enum.StrEnum):
    UDEV = "udev"
    INOTIFY = "inotify"
    TIMER = "timer"
    REQUEST = "request"


def resolve_source(source: UdevSource, control: Path = UDEV_CONTROL) -> UdevSource:
    if source is not UdevSource.AUTO:
        return source
    return UdevSource.UDEV if control.exists() else UdevSource.KERNEL


class ChangeFeed:
    """Collects change signals; ``wait`` returns at the first one or at the timeout."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._reason = Wakeup.TIMER
        self._monitor: Any = None
        self._monitor_fd = -1
        self._watcher: DirWatcher | None = None
        self._watched: set[Path] = set()
        self._unwatched: set[Path] = set()
        self._loop = asyncio.get_running_loop()
        self.source = UdevSource.OFF

    # -- udev -------------------------------------------------------------------

    def start_udev(self, source: UdevSource, subsystems: Collection[str] | None = None) -> None:
        """Listen to uevents; ``subsystems`` None means all of them."""
        source = resolve_source(source)
        if source is UdevSource.OFF:
            return
        try:
            monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source=source.value)
            for subsystem in sorted(subsystems or ()):
                monitor.filter_by(subsystem)
            monitor.start()
        except (OSError, ValueError, pyudev.DeviceNotFoundError) as exc:
            log.warning("no udev monitor (%s); relying on inotify and rescans", exc)
            return
        self._monitor = monitor
        self._monitor_fd = monitor.fileno()
        self._loop.add_reader(self._monitor_fd, self._on_uevent)
        self.source = source
        log.debug("listening to %s uevents", source.value)

    def _on_uevent(self) -> None:
        # Drain everything queued; one rescan covers the whole burst.
        try:
            while self._monitor.poll(timeout=0) is not None:
                pass
        except (OSError, pyudev.DeviceNotFoundError) as exc:
            log.debug("reading a uevent failed: %s", exc)
        self.signal(Wakeup.UDEV)

    # -- inotify ----------------------------------------------------------------

    @property
    def watching_all(self) -> bool:
        """Every directory asked for is under inotify (no timer needed for them)."""
        return self._watcher is not None and not self._unwatched

    def watch(self, directories: Collection[Path]) -> bool:
        """Watch these directories too; True when one was added (a rescan is due)."""
        new = set(directories) - self._watched
        self._unwatched = set()
        if not new:
            return False
        if self._watcher is None:
            try:
                self._watcher = DirWatcher(self._on_dir_event)
            except InotifyError as exc:
                log.warning("no inotify (%s); relying on udev and rescans", exc)
                self._watched |= new
                return False
        added = False
        for directory in sorted(new):
            try:
                self._watcher.add(directory)
            except OSError as exc:  # InotifyError included
                # Gone again, or out of watches: the periodic rescan covers it.
                log.debug("cannot watch %s: %s", directory, exc)
                self._unwatched.add(directory)
                continue
            self._watched.add(directory)
            added = True
        return added

    def _on_dir_event(self, event: DirEvent) -> None:
        if not event.name and event.directory in self._watched:
            # The directory itself went away; watch it again once it is back.
            self._watched.discard(event.directory)
        self.signal(Wakeup.INOTIFY)

    # -- waiting ----------------------------------------------------------------

    def signal(self, reason: Wakeup = Wakeup.REQUEST) -> None:
        if not self._event.is_set():
            self._reason = reason
            self._event.set()

    def clear(self) -> None:
        self._event.clear()

    async def wait(self, timeout: float | None) -> Wakeup:
        """The first signal's reason; Wakeup.TIMER after ``timeout`` (None: no timer)."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return Wakeup.TIMER
        return self._reason

    def close(self) -> None:
        if self._monitor_fd >= 0:
            self._loop.remove_reader(self._monitor_fd)
            self._monitor_fd = -1
        self._monitor = None
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._watched.clear()
