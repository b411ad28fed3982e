"""What a process holds right now: file descriptors, sockets, threads (Linux /proc)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Usage:
    fds: int
    sockets: int
    threads: int  # kernel threads of the process: gRPC's C threads count too

    def grown_since(self, before: Usage) -> dict[str, int]:
        """Counts that are higher now than in ``before``, and by how much."""
        grown = {
            "fds": self.fds - before.fds,
            "sockets": self.sockets - before.sockets,
            "threads": self.threads - before.threads,
        }
        return {name: delta for name, delta in grown.items() if delta > 0}


def usage(pid: int | str = "self") -> Usage:
    fd_dir = f"/proc/{pid}/fd"
    fds = sockets = 0
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except FileNotFoundError:  # closed while we looked (the listing's own fd, say)
            continue
        fds += 1
        sockets += target.startswith("socket:")
    return Usage(fds=fds, sockets=sockets, threads=len(os.listdir(f"/proc/{pid}/task")))
