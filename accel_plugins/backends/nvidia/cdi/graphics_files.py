"""The driver's graphics files a CDI spec mounts: EGL, Vulkan, X.Org, GBM.

NVIDIA's plugin puts them in every GPU container's spec through the toolkit's
graphics discoverer (nvidia-container-toolkit ``internal/discover/graphics.go``,
``pkg/nvcdi/driver-nvml.go``, v1.20.0 as k8s-device-plugin v0.20.0 vendors it);
each file only where it exists, nothing needs a flag:

- configuration files, every copy found under ``/etc`` then ``$XDG_DATA_DIRS``
  (``/usr/local/share`` and ``/usr/share`` when unset), at the same path;
- Vulkan's ICD and layer files, the first copy found under those directories or the
  root itself, always at ``/etc/vulkan/...`` in the container;
- the EGL platform libraries (``libnvidia-egl-gbm.so.*.*`` and the Wayland ones) and
  the Vulkan producer, in the driver's library directories;
- X.Org's ``nvidia_drv.so`` and ``libglxserver_nvidia.so.<version>``, the first found
  in the X.Org module directories;
- the links a ``create-symlinks`` hook makes for them: GBM's
  ``gbm/nvidia-drm_gbm.so`` to the allocator library, and the unversioned names of
  the Vulkan producer and the GLX server module.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePosixPath

from accel_plugins.backends.nvidia.cdi.driver_files import LIBRARY_DIRS, DriverRoot

CONFIGS = (
    "glvnd/egl_vendor.d/10_nvidia.json",
    "egl/egl_external_platform.d/15_nvidia_gbm.json",
    "egl/egl_external_platform.d/10_nvidia_wayland.json",
    "egl/egl_external_platform.d/09_nvidia_wayland2.json",
    "nvidia/nvoptix.bin",
    "X11/xorg.conf.d/10-nvidia.conf",
    "X11/xorg.conf.d/nvidia-drm-outputclass.conf",
    "OpenCL/vendors/nvidia.icd",
)
VULKAN = (
    "vulkan/icd.d/nvidia_icd.json",
    "vulkan/icd.d/nvidia_layers.json",
    "vulkan/implicit_layer.d/nvidia_layers.json",
)
VULKAN_CONTAINER_ROOT = "/etc"
EGL_LIBRARIES = (
    "libnvidia-egl-gbm.so.*.*",
    "libnvidia-egl-wayland.so.*.*",
    "libnvidia-egl-wayland2.so.*.*",
)
XORG_ROOTS = ("/usr/lib/xorg", "/usr/lib64/xorg", "/usr/X11R6/lib", "/usr/X11R6/lib64")
XORG_MODULES = ("drivers", "extensions", "updates/drivers", "updates/extensions")
XORG_DRIVER = "nvidia_drv.so"


@dataclass(frozen=True, slots=True)
class GraphicsFile:
    """A file to mount: ``path`` inside the driver root, ``container_path`` in the container."""

    path: str
    container_path: str


def config_dirs(xdg_data_dirs: str | None = None) -> list[str]:
    """``/etc``, then ``$XDG_DATA_DIRS`` or its default."""
    value = os.environ.get("XDG_DATA_DIRS", "") if xdg_data_dirs is None else xdg_data_dirs
    data = [d for d in value.split(":") if d.startswith("/")] or ["/usr/local/share", "/usr/share"]
    return ["/etc", *data]


def vulkan_files(machine: str) -> tuple[str, ...]:
    arch = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
    icd = f"vulkan/icd.d/nvidia_icd.{arch.get(machine, machine)}.json"
    return (*VULKAN, icd)


def xorg_dirs(library_dirs: Sequence[str]) -> list[str]:
    """Where X.Org modules are looked for: under each driver library directory, then the
    system's X.Org trees."""
    dirs: list[str] = []
    for lib in library_dirs:
        dirs.append(f"{lib}/nvidia/xorg")
        dirs += [f"{lib}/xorg/modules/{m}" for m in XORG_MODULES]
    for root in XORG_ROOTS:
        dirs += [f"{root}/modules/{m}" for m in XORG_MODULES]
    return dirs


class Graphics:
    """The graphics files of the driver ``version`` under ``driver``'s root. Each library
    directory is listed once, whatever the number of patterns looked for in it."""

    def __init__(
        self, driver: DriverRoot, version: str, *, xdg_data_dirs: str | None = None
    ) -> None:
        self.driver = driver
        self.version = version
        self.library_dirs = driver.library_dirs(version)
        self.configs = config_dirs(xdg_data_dirs)

    def _first(self, names: Sequence[str], dirs: Sequence[str]) -> list[str]:
        out = []
        for name in names:
            for directory in dirs:
                if self.driver.exists(f"{directory}/{name}"):
                    out.append(f"{directory}/{name}")
                    break
        return out

    @cached_property
    def _listings(self) -> list[tuple[str, list[str]]]:
        dirs = dict.fromkeys([*self.library_dirs, *LIBRARY_DIRS])
        return [(d, self.driver.names(d, "*")) for d in dirs]

    def _libraries(self, pattern: str) -> list[str]:
        return [
            f"{directory}/{name}"
            for directory, names in self._listings
            for name in names
            if fnmatch.fnmatchcase(name, pattern)
        ]

    @cached_property
    def _producer(self) -> list[str]:
        return self._libraries(f"libnvidia-vulkan-producer.so.{self.version}")

    @cached_property
    def _xorg(self) -> list[str]:
        names = (XORG_DRIVER, f"libglxserver_nvidia.so.{self.version}")
        return self._first(names, xorg_dirs(self.library_dirs))

    def files(self) -> list[GraphicsFile]:
        """Every graphics file to mount, in discovery order (the spec sorts them)."""
        # The allocator is a versioned driver library, mounted with the others.
        egl = [p for pattern in EGL_LIBRARIES for p in self._libraries(pattern)]
        out = [GraphicsFile(p, p) for p in [*egl, *self._producer, *self._xorg]]
        for name in CONFIGS:
            for directory in self.configs:
                path = f"{directory}/{name}"
                if self.driver.exists(path):
                    out.append(GraphicsFile(path, path))
        for name in vulkan_files(self.driver.machine):
            found = self._first([name], [*self.configs, ""])
            out += [GraphicsFile(p, f"{VULKAN_CONTAINER_ROOT}/{name}") for p in found]
        return out

    def links(self) -> list[str]:
        """``target::link`` pairs of the graphics ``create-symlinks`` hook."""
        links: list[str] = []
        for path in self._libraries(f"libnvidia-allocator.so.{self.version}"):
            directory = PurePosixPath(self.driver.resolve(path)).parent
            links.append(f"../libnvidia-allocator.so.1::{directory}/gbm/nvidia-drm_gbm.so")
        glx = [p for p in self._xorg if PurePosixPath(p).name != XORG_DRIVER]
        for path in [*self._producer, *glx]:
            parent, name = PurePosixPath(path).parent, PurePosixPath(path).name
            links.append(f"{name}::{parent}/{name.split('.so')[0]}.so")
        return links
