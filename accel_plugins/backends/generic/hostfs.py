"""Where the host's /dev and /sys are, as this process sees them.

Configs, device specs and CDI files speak host paths (``/dev/ttyUSB0``): the
container runtime resolves them on the host. The plugin may see the host's
/dev elsewhere (``--dev-root /host/dev``) and tests build trees in a temp dir,
so every file access goes through ``local()`` first.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

HOST_DEV = "/dev"
HOST_SYS = "/sys"
UDEV_DATA = Path("/run/udev/data")  # udevd's database: one file per device


@dataclass(frozen=True, slots=True)
class HostPaths:
    dev_root: Path = Path(HOST_DEV)
    sys_root: Path = Path(HOST_SYS)

    def local(self, host_path: str) -> str:
        """The path to open here for a host path; paths outside /dev are used as they are."""
        rest = _under(host_path, HOST_DEV)
        return host_path if rest is None else str(self.dev_root) + rest

    def host(self, local_path: str) -> str:
        rest = _under(local_path, str(self.dev_root))
        return local_path if rest is None else HOST_DEV + rest

    def local_pattern(self, host_pattern: str) -> str:
        """A glob pattern over local paths; the root itself is escaped, not matched."""
        rest = _under(host_pattern, HOST_DEV)
        return host_pattern if rest is None else glob.escape(str(self.dev_root)) + rest

    def glob(self, host_pattern: str) -> list[str]:
        """Host paths matching ``host_pattern``, sorted (Go's filepath.Glob plus sort)."""
        found = glob.glob(self.local_pattern(host_pattern), include_hidden=True)
        return sorted(self.host(p) for p in found)

    def sys(self, *parts: str) -> str:
        return os.path.join(self.sys_root, *parts)


def _under(path: str, root: str) -> str | None:
    """``path`` minus ``root`` ('' or '/...') when inside it, else None."""
    root = root.rstrip("/") or "/"
    if path == root:
        return ""
    if root == "/":
        return path
    if path.startswith(root + "/"):
        return path[len(root) :]
    return None
