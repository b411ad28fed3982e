"""Whether a unix socket file still has a process behind it."""

from __future__ import annotations

import socket
from pathlib import Path


def accepts_connections(path: Path, timeout: float = 1.0) -> bool:
    """Whether the unix socket at ``path`` accepts a connection: the file of a killed
    process stays behind, and only a connect tells the two apart."""
    if not path.is_socket():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
