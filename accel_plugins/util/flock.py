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
import threading
from collections.abc import AsyncIterator
from pathlib import Path


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
        """Take the lock, waiting while another process holds it.

        The wait is a blocking flock in a daemon thread: the kernel hands the lock over
        the moment it is released (polling missed the microsecond gaps between another
        process's back-to-back Prepares and starved). A daemon thread, not the loop's
        executor: a stopping process must not wait for it, and a cancelled wait gives
        the lock back as soon as the thread gets it.
        """
        if self.try_acquire():
            return
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()
        fd = self._open()

        def hand_over() -> None:
            if granted.cancelled():
                self.release()
            else:
                self.held = True
                granted.set_result(None)

        def wait() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                return  # closed under us: nobody waits any more
            try:
                loop.call_soon_threadsafe(hand_over)
            except RuntimeError:  # the loop is gone, the file maybe closed with it
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)

        threading.Thread(target=wait, name=f"flock {self.path.name}", daemon=True).start()
        await granted

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
