"""Counting kubelet restarts from two signals that can report the same one.

A kubelet restart shows as its socket file created again. inotify's creation
event is the reliable sign (a new socket often reuses the old inode number);
a socket check that finds another inode than the last one seen catches
restarts whose event was lost. Both can see one restart: when a check runs
between the new socket's creation and the handling of its event (a
directory wipe wakes a check at that moment), the check counts it first, and
the event that follows is for the same file. The tracker remembers the file
a check counted ahead of its event, so each socket file counts once.
"""

from __future__ import annotations

from collections.abc import Callable


class KubeletRestarts:
    """Feeds ``on_restart`` once per kubelet socket file after the first one seen."""

    def __init__(self, on_restart: Callable[[], None]) -> None:
        self._on_restart = on_restart
        # The inode of the socket last seen; None before the first one.
        self._seen: int | None = None
        # A socket a check counted whose creation event may still be on its way.
        self._counted_ahead: int | None = None

    def checked(self, identity: int | None) -> None:
        """A socket check found the socket with this inode (None: no socket now)."""
        if identity is None:
            self._counted_ahead = None  # that socket is gone; its event is stale
            return
        if self._seen is not None and identity != self._seen:
            self._on_restart()
            self._counted_ahead = identity
        self._seen = identity

    def created(self, identity: int | None) -> None:
        """inotify: the socket was created; ``identity`` is the inode found now."""
        if identity is None:
            return  # removed again already; a later event or check sees the next one
        if identity == self._counted_ahead:
            self._counted_ahead = None  # the check counted this very file
        elif self._seen is not None:
            self._on_restart()
        self._seen = identity
