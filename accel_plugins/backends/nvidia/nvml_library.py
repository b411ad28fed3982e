"""Where libnvidia-ml is looked for: an explicit path, else the usual places under a driver root.

pynvml finds the library on the system search path only; a driver installed
under another root (the GPU operator's ``/run/nvidia/driver``) is not on it,
so :class:`~.nvml.Pynvml` tries these candidates in order and loads the first.
"""

from __future__ import annotations

from pathlib import Path

_LIBRARY = "libnvidia-ml.so.1"
# Where driver containers and distributions put the library, relative to the driver root.
_LIBRARY_DIRS = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib",
    "lib64",
    "lib/x86_64-linux-gnu",
)


def library_candidates(driver_root: Path, library: str | None = None) -> list[str]:
    """Where to look for libnvidia-ml: an explicit path alone, else the usual places."""
    if library:
        return [library]
    found = [_LIBRARY]
    for folder in _LIBRARY_DIRS:
        path = str(driver_root / folder / _LIBRARY)
        if path not in found:
            found.append(path)
    return found
