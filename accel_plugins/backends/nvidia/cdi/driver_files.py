"""The driver's files under a driver root: what a CDI spec mounts into a container.

The one place that looks at the driver's file system; the root is a parameter
so tests build a fake driver root under a temporary directory. What is looked
for, and where, follows NVIDIA's CDI generator (nvidia-container-toolkit
``pkg/nvcdi/driver-nvml.go``, ``internal/discover/ipc.go``,
``pkg/lookup/library.go``, ``internal/lookup/root``):

- the driver version: the suffix of the file ``libnvidia-ml.so.1`` resolves to
  (``libnvidia-ml.so.550.54.15``); NVIDIA asks NVML, which reads the same file;
- libraries: every ``*.so.<version>`` in the directories that hold the driver's
  versioned libraries (and their ``vdpau`` subdirectory), found through the
  linker cache under the root (``ldcache.py``) or, failing that, the library
  directories NVIDIA searches; plus the legacy ``libnvidia-nvvm70.so.*``;
- utilities: ``nvidia-smi`` and the other programs NVIDIA mounts, each where it
  is first found in the plugin's ``PATH``, then the usual ``bin`` and ``sbin``
  directories (``pkg/lookup/path.go``), as found: links are not resolved;
- IPC sockets: ``nvidia-persistenced`` and ``nvidia-fabricmanager`` under
  ``/run`` or ``/var/run`` (the first found); MPS's ``/tmp/nvidia-mps`` only if it
  is not a directory (NVIDIA's file filter drops directories, so in practice never);
- firmware: every ``nvidia/<version>/gsp*.bin`` in the kernel's firmware
  directories: the one ``/sys/module/firmware_class/parameters/path`` names,
  then the ``/lib/firmware`` ones;
- graphics files (``graphics_files.py``).

Paths are returned as they are inside the root (``/usr/bin/nvidia-smi``): a
container sees them there; :meth:`DriverRoot.host_path` prefixes the root as the
host names it. The plugin may see the root elsewhere (NVIDIA's chart, and ours
with CDI, mount the host's driver root at ``/driver-root``): ``root`` is where
the files are read, ``host_root`` where the host has them (NVIDIA's driver root
and target driver root). Symbolic links are followed inside the root (a driver
container's absolute links point into its own tree, not the plugin's).
"""

from __future__ import annotations

import fnmatch
import os
import platform
import stat
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from accel_plugins.backends.nvidia.cdi import ldcache

LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
)
"""Where NVIDIA looks for a library the linker cache does not list (pkg/lookup/library.go)."""
BINARY_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
IPC_SOCKETS = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")
FIRMWARE_CLASS_PATH = Path("/sys/module/firmware_class/parameters/path")
"""The kernel's extra firmware directory (empty unless set), read from the plugin's /sys."""
IPC_DIRS = ("/run", "/var/run")
MPS_PIPE_DIR = "/tmp/nvidia-mps"
NVML_LIBRARY = "libnvidia-ml.so.1"
LEGACY_NVVM = "libnvidia-nvvm70.so."
_MAX_LINKS = 40


class DriverRoot:
    """The driver's files under ``root`` (``/`` or a driver container's ``/run/nvidia/driver``),
    which the host has under ``host_root`` (default: the same path)."""

    def __init__(
        self,
        root: Path,
        *,
        host_root: Path | None = None,
        machine: str | None = None,
        kernel_release: str | None = None,
        search_path: str | None = None,
        firmware_class_path: Path = FIRMWARE_CLASS_PATH,
    ) -> None:
        self.root = root
        self.host_root = host_root or root
        self.machine = machine or platform.machine()
        self._cache = ldcache.read(root, machine)
        self._kernel_release = kernel_release or platform.release()
        self._search_path = os.environ.get("PATH", "") if search_path is None else search_path
        self._firmware_class_path = firmware_class_path
        self._library_dirs: dict[str, list[str]] = {}  # by version: asked for thrice per spec

    def host_path(self, path: str) -> str:
        """``/usr/bin/nvidia-smi`` under the root as the host has it (a spec's ``hostPath``)."""
        return str(PurePosixPath(str(self.host_root)) / path.lstrip("/"))

    def local(self, path: str) -> str:
        """The same file where this process reads it."""
        return str(PurePosixPath(str(self.root)) / path.lstrip("/"))

    def _exists(self, path: str) -> bool:
        return os.path.lexists(self.local(path))

    def resolve(self, path: str) -> str:
        """Follow symbolic links inside the root; the final path (inside the root)."""
        current = PurePosixPath(path)
        for _ in range(_MAX_LINKS):
            host = Path(self.local(str(current)))
            if not host.is_symlink():
                return str(current)
            target = PurePosixPath(os.readlink(host))
            current = target if target.is_absolute() else current.parent / target
            current = PurePosixPath(os.path.normpath(str(current)))
        return str(current)

    def locate_library(self, name: str) -> str | None:
        """Where ``name`` is inside the root: the linker cache first, then NVIDIA's dirs."""
        for entry in self._cache:
            if entry.name == name and self._exists(entry.path):
                return entry.path
        for directory in LIBRARY_DIRS:
            candidate = f"{directory}/{name}"
            if self._exists(candidate):
                return candidate
        return None

    def version(self) -> str | None:
        """The driver version, from the file ``libnvidia-ml.so.1`` resolves to; None without."""
        found = self.locate_library(NVML_LIBRARY)
        if found is None:
            return None
        name = PurePosixPath(self.resolve(found)).name
        prefix = "libnvidia-ml.so."
        version = name[len(prefix) :] if name.startswith(prefix) else ""
        return version if version and version != "1" else None

    def library_dirs(self, version: str) -> list[str]:
        """The directories holding the driver's versioned libraries (``lib*.so.<version>``)."""
        if version not in self._library_dirs:
            self._library_dirs[version] = self._find_library_dirs(version)
        return list(self._library_dirs[version])

    def _find_library_dirs(self, version: str) -> list[str]:
        suffix = f".so.{version}"
        dirs: dict[str, None] = {}
        for entry in self._cache:
            lib = entry.name.startswith("lib") and entry.path.endswith(suffix)
            if lib and self._exists(entry.path):
                dirs[str(PurePosixPath(entry.path).parent)] = None
        if not dirs:
            for directory in LIBRARY_DIRS:
                if any(n.startswith("lib") for n in self._names(directory, suffix)):
                    dirs[directory] = None
        return list(dirs)

    def libraries(self, version: str) -> list[str]:
        """Every ``*.so.<version>`` of the driver, and the legacy NVVM library, sorted."""
        suffix = f".so.{version}"
        dirs = self.library_dirs(version)
        found: dict[str, None] = {}
        for directory in [*dirs, *(f"{d}/vdpau" for d in dirs)]:
            for name in self._names(directory, suffix):
                found[f"{directory}/{name}"] = None
        for directory in dirs:
            for name in self._names(directory, ""):
                if name.startswith(LEGACY_NVVM):
                    found[f"{directory}/{name}"] = None
        return sorted(found)

    def binary_dirs(self) -> list[str]:
        """The plugin's ``PATH`` entries, then the usual directories not already among them."""
        entries = [d for d in self._search_path.split(":") if d.startswith("/")]
        return list(dict.fromkeys([*entries, *BINARY_DIRS]))

    def binaries(self) -> list[str]:
        """NVIDIA's utilities, each where it is first found as an executable file."""
        out: list[str] = []
        dirs = self.binary_dirs()
        for program in BINARIES:
            for directory in dirs:
                path = f"{directory.rstrip('/')}/{program}"
                if self._is_executable(path):
                    out.append(path)
                    break
        return out

    def _is_executable(self, path: str) -> bool:
        try:
            mode = os.stat(self.local(path)).st_mode  # follows links, as NVIDIA's check
        except OSError:
            return False
        return not stat.S_ISDIR(mode) and bool(mode & 0o111)

    def ipc(self) -> list[str]:
        """The daemons' sockets (first of /run, /var/run); MPS's pipe only as a file."""
        out: list[str] = []
        for socket in IPC_SOCKETS:
            for directory in IPC_DIRS:
                if self._exists(f"{directory}/{socket}"):
                    out.append(f"{directory}/{socket}")
                    break
        if self._exists(MPS_PIPE_DIR) and not os.path.isdir(self.local(MPS_PIPE_DIR)):
            out.append(MPS_PIPE_DIR)
        return out

    def firmware_dirs(self) -> list[str]:
        """The kernel's firmware search path: its custom directory first, when set."""
        release = self._kernel_release
        try:
            custom = self._firmware_class_path.read_text().strip()
        except OSError:
            custom = ""
        standard = [
            f"/lib/firmware/updates/{release}",
            "/lib/firmware/updates",
            f"/lib/firmware/{release}",
            "/lib/firmware",
        ]
        return [custom, *standard] if custom.startswith("/") else standard

    def firmware(self, version: str) -> list[str]:
        """Every GSP firmware file of this driver version in the firmware directories."""
        found: dict[str, None] = {}
        for directory in self.firmware_dirs():
            nvidia = f"{directory.rstrip('/')}/nvidia/{version}"
            for name in self._names(nvidia, ".bin"):
                if name.startswith("gsp"):
                    found[f"{nvidia}/{name}"] = None
        return list(found)

    def symlinks_in(self, directory: str) -> dict[str, str]:
        """Symbolic links in a directory: link name -> the name it points to."""
        out: dict[str, str] = {}
        host = Path(self.local(directory))
        for name in self._names(directory, ""):
            if (host / name).is_symlink():
                out[name] = PurePosixPath(os.readlink(host / name)).name
        return out

    def names(self, directory: str, pattern: str) -> list[str]:
        """The names in a directory (inside the root) that match a glob pattern, sorted."""
        return [n for n in self._names(directory, "") if fnmatch.fnmatchcase(n, pattern)]

    def exists(self, path: str) -> bool:
        """Whether ``path`` (inside the root) is there, a dangling link included."""
        return self._exists(path)

    def _names(self, directory: str, suffix: str) -> Iterable[str]:
        try:
            names = os.listdir(self.local(directory))
        except OSError:
            return []
        return sorted(n for n in names if n.endswith(suffix))
