"""Notice that a configuration file changed, so the plugin reloads it without a restart.

A ConfigMap volume is updated by the kubelet's AtomicWriter: it writes the new
files into a fresh hidden directory (``..2026_11_24_21_00_00.123``), points a
new symlink ``..data_tmp`` at it and renames that over ``..data``. The file
the plugin was given (``config.yaml``) is itself a symlink into ``..data/``, so
it never changes as a directory entry: only the rename of ``..data`` in the
same directory announces the update. A file edited in place, or replaced by
``mv``, announces itself by name instead.

Rather than decoding which event means what, every event in the file's
directory makes the watcher read the file again and compare its content with
what it read last; only a different content (a file that vanished counts)
calls ``on_change``. Events are inotify's (no polling); a ``subPath`` mount is
never updated by the kubelet, so watching one finds nothing to reload.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from accel_plugins.util.watch import (
    DIR_CHANGES,
    IN_ATTRIB,
    IN_CLOSE_WRITE,
    DirEvent,
    DirWatcher,
    InotifyError,
)

log = logging.getLogger(__name__)

# Created/renamed/removed entries (the ..data swap, mv), finished writes (an
# editor, ``cp``) and mode changes; IN_MODIFY is left out so a half-written file
# is not read.
CONFIG_CHANGES = DIR_CHANGES | IN_CLOSE_WRITE | IN_ATTRIB


def digest(path: Path) -> str | None:
    """A fingerprint of the file's content; None when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigWatcher:
    """Calls ``on_change(path)`` on the event loop when a watched file's content changes.

    Start it after the files were first read, so the content it compares with
    is the one being served. Raises InotifyError when inotify is unavailable
    (the caller logs that live reload is off and SIGHUP still works).
    """

    def __init__(self, paths: Sequence[Path], on_change: Callable[[Path], None]) -> None:
        self._paths = tuple(Path(p).absolute() for p in paths)
        self._on_change = on_change
        self._seen = {path: digest(path) for path in self._paths}
        self._watcher = DirWatcher(self._on_event, mask=CONFIG_CHANGES)
        try:
            for directory in sorted({path.parent for path in self._paths}):
                self._watcher.add(directory)
        except InotifyError:
            self._watcher.close()
            raise

    @property
    def paths(self) -> tuple[Path, ...]:
        return self._paths

    def _on_event(self, event: DirEvent) -> None:
        for path in self._paths:
            if event.directory != path.parent and not event.overflow:
                continue
            now = digest(path)
            if now == self._seen[path]:
                continue
            self._seen[path] = now
            log.info("%s changed (%s); reloading the configuration", path, event.name or "dir")
            self._on_change(path)

    def close(self) -> None:
        self._watcher.close()


def watch_configs(paths: Sequence[Path], on_change: Callable[[Path], None]) -> ConfigWatcher | None:
    """A started :class:`ConfigWatcher`, or None (logged) where inotify cannot be used."""
    if not paths:
        return None
    try:
        watcher = ConfigWatcher(paths, on_change)
    except InotifyError as exc:
        log.warning("no inotify (%s): configuration changes apply on SIGHUP only", exc)
        return None
    log.info(
        "watching %s: changes are applied without a restart",
        ", ".join(str(p) for p in watcher.paths),
    )
    return watcher
