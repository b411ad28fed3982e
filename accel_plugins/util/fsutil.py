"""Small filesystem helpers shared by the kubelet emulator and the backends."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` so readers see the old file or the new, never half."""
    import tempfile  # with random behind it, about 2 ms that most starts never need

    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
