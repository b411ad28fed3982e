"""A small inotify watcher for the emulator's plugin watcher (Linux only).

The emulator keeps its own instead of reusing ``accel_plugins.util.watch``:
it emulates the kubelet facing any vendor's plugin and never imports the plugin
framework, so a bug in the framework's watcher cannot hide behind the same
code on the kubelet's side. It reports what the kubelet's fsnotify watcher
acts on: entries created or moved in (fsnotify's Create), entries deleted
(Remove), and a lost-events overflow.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import enum
import os
import struct
from collections.abc import Callable
from pathlib import Path

from accel_plugins.kubelet_emulator.errors import KubeletError

_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_MASK = _IN_CREATE | _IN_MOVED_TO | _IN_DELETE | _IN_ONLYDIR
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


class Change(enum.Enum):
    CREATED = "created"
    REMOVED = "removed"
    OVERFLOW = "overflow"  # events were lost: look at everything again


Callback = Callable[[Change, Path], None]


class DirWatch:
    """Calls ``callback(change, path)`` on the loop for each entry created or removed
    in the watched directories."""

    def __init__(self, callback: Callback) -> None:
        # The interpreter's own symbols include the C library's; find_library would
        # run `ldconfig -p` in a child process, so it is only the fallback.
        self._libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(self._libc, "inotify_init1"):
            name = ctypes.util.find_library("c") or "libc.so.6"
            try:
                self._libc = ctypes.CDLL(name, use_errno=True)
            except OSError as exc:
                raise KubeletError(f"cannot load libc for inotify: {exc}") from exc
        fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise KubeletError(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self._fd = fd
        self._callback = callback
        self._dirs: dict[int, Path] = {}
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_readable)

    def add(self, directory: Path) -> None:
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), ctypes.c_uint32(_MASK))
        if wd < 0:
            error = os.strerror(ctypes.get_errno())
            raise KubeletError(f"cannot watch {directory}: inotify_add_watch: {error}")
        self._dirs[wd] = directory

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 64 * 1024)
        except (BlockingIOError, InterruptedError):
            return
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size : offset + _HEADER.size + length]
            offset += _HEADER.size + length
            if mask & _IN_Q_OVERFLOW:
                self._callback(Change.OVERFLOW, Path())
                continue
            directory = self._dirs.get(wd)
            if mask & _IN_IGNORED:
                self._dirs.pop(wd, None)
                continue
            if directory is None or not raw:
                continue
            path = directory / os.fsdecode(raw.rstrip(b"\0"))
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                self._callback(Change.CREATED, path)
            elif mask & _IN_DELETE:
                self._callback(Change.REMOVED, path)

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._dirs.clear()
