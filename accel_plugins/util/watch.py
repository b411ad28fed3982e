"""Event-driven directory watching (Linux inotify) for the asyncio loop.

Used to notice a kubelet restart at once: kubelet.sock being re-created, or
our own socket being removed. Where inotify is unavailable the caller falls
back to its periodic check.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

DIR_CHANGES = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


@dataclass(frozen=True, slots=True)
class DirEvent:
    directory: Path
    name: str  # empty for events about the directory itself
    mask: int

    @property
    def created(self) -> bool:
        return bool(self.mask & (IN_CREATE | IN_MOVED_TO))

    @property
    def removed(self) -> bool:
        return bool(self.mask & (IN_DELETE | IN_MOVED_FROM))

    @property
    def overflow(self) -> bool:
        """Events were lost; the receiver must re-check everything."""
        return bool(self.mask & IN_Q_OVERFLOW)


class InotifyError(OSError):
    """inotify cannot be used here (not Linux, or out of watches)."""


def _libc() -> ctypes.CDLL:
    # The interpreter's own symbols include the C library's: no search needed.
    # find_library runs `ldconfig -p` in a child process (a millisecond or more of
    # start-up, issue 17); it stays as the fallback for a libc loaded otherwise.
    process = ctypes.CDLL(None, use_errno=True)
    if hasattr(process, "inotify_init1"):
        return process
    from ctypes.util import find_library

    name = find_library("c") or "libc.so.6"
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise InotifyError(f"cannot load libc for inotify: {exc}") from exc


class DirWatcher:
    """Calls ``callback`` on the loop for each change in the watched directories."""

    def __init__(
        self,
        callback: Callable[[DirEvent], None],
        *,
        mask: int = DIR_CHANGES,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise InotifyError(err, f"inotify_init1: {os.strerror(err)}")
        self._fd = fd
        self._mask = mask
        self._callback = callback
        self._dirs: dict[int, Path] = {}
        self._loop = loop or asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_readable)

    def add(self, directory: Path) -> None:
        wd = self._libc.inotify_add_watch(
            self._fd, os.fsencode(directory), ctypes.c_uint32(self._mask | IN_ONLYDIR)
        )
        if wd < 0:
            err = ctypes.get_errno()
            raise InotifyError(err, f"inotify_add_watch {directory}: {os.strerror(err)}")
        self._dirs[wd] = directory

    @property
    def directories(self) -> list[Path]:
        return list(self._dirs.values())

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 64 * 1024)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno == errno.EINTR:
                return
            raise
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size : offset + _HEADER.size + length]
            offset += _HEADER.size + length
            name = os.fsdecode(raw.rstrip(b"\0"))
            directory = self._dirs.get(wd, Path())
            if mask & IN_IGNORED:
                self._dirs.pop(wd, None)
            self._callback(DirEvent(directory, name, mask))

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._dirs.clear()


# Where inotify is missing (exotic filesystems, exhausted watches) both modes check their
# sockets on a timer instead; this says so once.
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
