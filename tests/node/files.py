"""Await a file's removal on the node's disk through inotify (no polling)."""

from __future__ import annotations

import ctypes
import os
import select
import time
from pathlib import Path

_IN_DELETE = 0x00000200
_IN_MOVED_FROM = 0x00000040
_IN_CLOEXEC = 0o2000000
GONE_WITHIN = 60.0  # a bound for a stuck case only; the wait ends on the removal


def await_removed(path: Path, timeout: float = GONE_WITHIN) -> bool:
    """True once ``path`` is gone (at once if it is); False if it is still there at ``timeout``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(_IN_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        if libc.inotify_add_watch(fd, bytes(path.parent), _IN_DELETE | _IN_MOVED_FROM) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path.parent}")
        deadline = time.monotonic() + timeout
        while path.exists():  # checked after the watch is set: no removal slips between
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return False
            os.read(fd, 65536)
        return True
    finally:
        os.close(fd)
