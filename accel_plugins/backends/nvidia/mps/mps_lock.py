"""The MPS daemon's life lock: held by a running ``mps-control-daemon``, gone when it dies.

``.ready`` and ``.started`` are files: a daemon killed with SIGKILL (its whole
container, say) leaves them behind, and the plugin would go on offering MPS
replicas that no daemon serves. A ``flock`` is released by the kernel when the
last descriptor of its holder closes, however the holder dies, so the daemon
holds one on ``<root>/.daemon.lock`` for as long as it runs, and the plugin
asks, without waiting, whether it could take it: if it can, no daemon runs.

``flock`` (not ``fcntl`` record locks): a probe's open and close of the file
never drops the daemon's lock, and a descriptor opened read-only may take it
(the chart mounts the root read-only into the plugin). The file itself is never
removed: a second daemon must lock the same inode.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = ".daemon.lock"
RETRY_SECONDS = 0.1
WARN_AFTER_TRIES = 10


def lock_path(root: Path) -> Path:
    return root / LOCK_FILE


def daemon_alive(root: Path) -> bool:
    """A daemon holds the lock now (False when the file is missing or unreadable)."""
    try:
        fd = os.open(lock_path(root), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        # Only "someone holds it" means alive; any other error is no proof of a daemon.
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


class DaemonLock:
    """The daemon's side: take the lock (waiting out another holder), keep it until released."""

    def __init__(self, root: Path) -> None:
        self.path = lock_path(root)
        self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it; OSError when the file cannot be made."""
        if self._fd >= 0:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Close-on-exec: the control programs must not inherit it and outlive us holding it.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        self._fd = fd
        return True

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until the lock is ours (True) or ``stop`` is set (False): another daemon
        may still be quitting, or a plugin probing it for a moment."""
        tries = 0
        while not self.try_acquire():
            if stop.is_set():
                return False
            tries += 1
            if tries == WARN_AFTER_TRIES:  # a probe holds it for microseconds, not this long
                log.warning("%s is held by another MPS control daemon; waiting", self.path)
            await asyncio.sleep(RETRY_SECONDS)
        return True

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1
