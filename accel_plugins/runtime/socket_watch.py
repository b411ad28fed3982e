"""Watching the directories our sockets live in, in both modes, or saying why not.

A kubelet restart, or anyone removing one of our sockets, shows as an inotify event
in the socket's directory; both modes watch theirs so they serve and register again
within milliseconds. Where inotify is missing (exotic filesystems, exhausted watches)
the mode checks its sockets on a timer instead, and this says so once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from accel_plugins.util.watch import DirEvent, DirWatcher, InotifyError

log = logging.getLogger(__name__)


def watch_directories(
    directories: Iterable[Path],
    on_event: Callable[[DirEvent], None],
    *,
    check_interval: float,
    create_mode: int | None = None,
) -> DirWatcher | None:
    """A watcher of ``directories`` (made first with ``create_mode`` when given), or None,
    logged, when inotify is unavailable: the caller then checks every ``check_interval``."""
    try:
        watcher = DirWatcher(on_event)
        for directory in sorted(set(directories)):
            if create_mode is not None:
                directory.mkdir(create_mode, parents=True, exist_ok=True)
            watcher.add(directory)
    except InotifyError as exc:
        log.warning("no inotify (%s); checking sockets every %.0fs instead", exc, check_interval)
        return None
    return watcher
