"""The driver's instances on one node: the old and new pod of a rolling update.

Since Kubernetes 1.33 the kubelet accepts several registrations of one DRA
driver, one socket pair each, so a DaemonSet rolling with ``maxSurge`` can
start the new pod while the old one still serves (the kubeletplugin library's
``RollingUpdate(podUID)``). Each instance then serves sockets named after its
pod UID, ``dra-<uid>.sock`` beside the checkpoint and
``<driver>-<uid>-reg.sock`` in the registry, as that library names them, and
never touches another live instance's sockets.

Every instance holds ``instance-<uid>.lock`` (flock) for its whole life, so a
lock nobody holds means the instance is gone: its sockets, left behind by a
kill, are swept by the next instance to start. Without a pod UID (kubelets
before 1.33, which keep one registration per driver) the sockets have the
fixed names and ``instance.lock`` admits one instance at a time: a second one
stands by until the first exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from accel_plugins.dra.registration_socket import registration_socket_name
from accel_plugins.util.flock import FileLock, held_elsewhere
from accel_plugins.util.unix_socket import accepts_connections

log = logging.getLogger(__name__)

LOCK_PREFIX = "instance"
LOCK_SUFFIX = ".lock"


def dra_socket_name(uid: str = "") -> str:
    """``dra.sock``, or ``dra-<uid>.sock`` for one pod of a rolling update."""
    return f"dra-{uid}.sock" if uid else "dra.sock"


def lock_name(uid: str = "") -> str:
    return f"{LOCK_PREFIX}-{uid}{LOCK_SUFFIX}" if uid else f"{LOCK_PREFIX}{LOCK_SUFFIX}"


def uid_of_lock(name: str) -> str | None:
    """The pod UID a lock file name carries ("" for the fixed instance); None: not a lock."""
    if name == lock_name():
        return ""
    prefix = f"{LOCK_PREFIX}-"
    if name.startswith(prefix) and name.endswith(LOCK_SUFFIX):
        return name[len(prefix) : -len(LOCK_SUFFIX)] or None
    return None


class Instance:
    """This process as one instance of ``driver`` on the node (``uid``: its pod's UID)."""

    def __init__(self, plugin_dir: Path, registry_dir: Path, driver: str, uid: str = "") -> None:
        self.plugin_dir = plugin_dir
        self.registry_dir = registry_dir
        self.driver = driver
        self.uid = uid
        self._lock = FileLock(plugin_dir / lock_name(uid))
        self.standby: str | None = None  # why it waits to serve, while it does

    @property
    def lock_path(self) -> Path:
        return self._lock.path

    def alive(self, uid: str) -> bool:
        """Whether the instance ``uid`` runs now (holds its lock), ourselves included."""
        if uid == self.uid and self._lock.held:
            return True
        return held_elsewhere(self.plugin_dir / lock_name(uid))

    def try_start(self) -> bool:
        """Hold our instance lock if no other process does (False: one does, stand by)."""
        while self._lock.try_acquire():
            if self._lock.linked():
                return True
            # Swept between our open and our lock by an instance that saw it free: again.
            self._lock.close()
        return False

    async def start(self) -> None:
        """Hold our instance lock, waiting while another process of our name holds it."""
        while True:
            await self._lock.acquire()
            if self._lock.linked():
                return
            self._lock.close()

    async def admitted(self, stopping: asyncio.Event, where: str) -> bool:
        """Hold our lock, standing by (``standby`` says so) while another process of our
        name holds it (``where`` says what it serves); False when ``stopping`` came first."""
        if self.try_start():
            return True
        self.standby = f"standing by while another instance of {where} (no pod UID: one at a time)"
        log.info("DRA driver: %s", self.standby)
        start = asyncio.ensure_future(self.start())
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({start, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not start.done():
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await start
            return False
        self.standby = None
        return not stopping.is_set()

    def stop(self) -> None:
        self._lock.close()

    def sweep(self) -> list[Path]:
        """Remove the sockets of instances that are gone (their lock free, their sockets
        dead) and their lock files; returns what was removed."""
        removed: list[Path] = []
        for lock in sorted(self.plugin_dir.glob(f"{LOCK_PREFIX}*{LOCK_SUFFIX}")):
            uid = uid_of_lock(lock.name)
            if uid is None or uid == self.uid or held_elsewhere(lock):
                continue
            sockets = (
                self.plugin_dir / dra_socket_name(uid),
                self.registry_dir / registration_socket_name(self.driver, uid),
            )
            for path in sockets:
                if path.exists() and not accepts_connections(path):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                        removed.append(path)
            if uid:  # the fixed lock is everybody's way in: it stays
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()
                    removed.append(lock)
        if removed:
            log.info("removed what gone instances left: %s", ", ".join(map(str, removed)))
        return removed
