"""Wake the backend when devices may have changed: udev events, inotify, a timer.

Three sources feed one flag the backend waits on:

- a netlink monitor (pyudev) read on the event loop, of udevd's events or
  the kernel's: eventsource.py chooses the one that reaches this network
  namespace (a pod without hostNetwork hears only the kernel's);
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

from accel_plugins.backends.generic.eventsource import (
    EventPaths,
    SourceChoice,
    UdevSource,
    choose_source,
)
from accel_plugins.util.watch import DirEvent, DirWatcher, InotifyError

__all__ = ["ChangeFeed", "UdevSource", "Wakeup", "announce", "resolve_source"]

log = logging.getLogger(__name__)

UDEV_CONTROL = EventPaths().udev_control
# Choices already logged: a config reload builds a new feed, the reason stays the same.
_announced: set[SourceChoice] = set()


class Wakeup(enum.StrEnum):
    UDEV = "udev"
    INOTIFY = "inotify"
    TIMER = "timer"
    REQUEST = "request"


def resolve_source(source: UdevSource, paths: EventPaths | None = None) -> UdevSource:
    return choose_source(source, paths).source


def announce(choice: SourceChoice) -> None:
    """Log the source and why, once per process (at start, not on every reload)."""
    if choice in _announced:
        return
    _announced.add(choice)
    level = logging.WARNING if choice.doubtful else logging.INFO
    log.log(level, "uevent source: %s (%s)", choice.source.value, choice.reason)


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

    def start_udev(
        self,
        asked: UdevSource,
        subsystems: Collection[str] | None = None,
        paths: EventPaths | None = None,
    ) -> None:
        """Listen to uevents; ``subsystems`` None means all of them."""
        choice = choose_source(asked, paths)
        announce(choice)
        source = choice.source
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
        # Drain everything queued; one rescan covers the whole burst. The kernel's
        # events are not filtered in the kernel as udevd's are (libudev's socket
        # filter passes messages without its header): libudev drops those of other
        # subsystems here, returning None, and only a kept one wakes the scan.
        # A None also ends the drain; the reader fires again while more are queued.
        kept = False
        try:
            while self._monitor.poll(timeout=0) is not None:
                kept = True
        except (OSError, pyudev.DeviceNotFoundError) as exc:
            log.debug("reading a uevent failed: %s", exc)
            kept = True
        if kept:
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
