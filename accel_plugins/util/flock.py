"""Advisory file locks (flock) shared between processes on one node.

Two pods of one DaemonSet overlap during a rolling update; what they share on
the host (the checkpoint, the right to publish slices) is guarded by flock,
which the kernel releases when the holding process dies, however it dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

# A holder keeps a lock for milliseconds (one Prepare) or for its life (an instance).
POLL_FIRST = 0.002
POLL_MAX = 0.1


class FileLock:
    """An exclusive flock on ``path`` (created 0600 when missing).

    One open file per instance: flock is per open file, so two FileLocks on one
    path exclude each other even within a process. Not reentrant.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self.held = False

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; never waits."""
        try:
            fcntl.flock(self._open(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.held = True
        return True

    async def acquire(self) -> None:
        """Take the lock, polling while another process holds it.

        Polled, not waited for in a worker thread: a thread blocked in flock cannot be
        cancelled, and the event loop's shutdown would wait for it (a stopping plugin
        would hang until the other process let go).
        """
        delay = POLL_FIRST
        while not self.try_acquire():
            await asyncio.sleep(delay)
            delay = min(delay * 2, POLL_MAX)

    def linked(self) -> bool:
        """Whether ``path`` still names the file we opened (not removed or replaced)."""
        if self._fd is None:
            return False
        try:
            return os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self.held = False

    def close(self) -> None:
        """Release and close (the file stays: removing it would race another locker)."""
        fd, self._fd = self._fd, None
        self.held = False
        if fd is not None:
            os.close(fd)

    @contextlib.asynccontextmanager
    async def locked(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()


def held_elsewhere(path: Path) -> bool:
    """Whether another open file holds a flock on ``path`` (False when it does not exist)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's own lock
    return False
