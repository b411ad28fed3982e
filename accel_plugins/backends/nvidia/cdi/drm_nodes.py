"""A GPU's DRM device nodes (``/dev/dri/card*``, ``renderD*``) and their by-path links.

NVIDIA's CDI spec gives a GPU, beside ``/dev/nvidia<minor>``, the DRM nodes the
kernel lists for its PCI device (nvidia-container-toolkit ``internal/info/drm``:
every entry of ``/sys/bus/pci/devices/<bus>/drm``, as ``/dev/dri/<entry>``), and a
``create-symlinks`` hook that recreates ``/dev/dri/by-path/pci-<bus>-card`` and
``-render`` in the container where they point at one of those nodes
(``internal/platform-support/dgpu/by-path-hooks.go``). A MIG device gets them only
when its profile has graphics (``+gfx``). Nodes exist only with the ``nvidia-drm``
module loaded; on a headless node (an H200 here) there are none.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from accel_plugins.backends.nvidia.container_contract import device_node, host_path
from accel_plugins.plugin.device import DeviceNode

BY_PATH_KINDS = ("card", "render")


def drm_nodes(sys_root: Path, dev_root: Path, pci_bus_id: str) -> tuple[DeviceNode, ...]:
    """``/dev/dri/<entry>`` for each DRM entry of the PCI device, in name order."""
    try:
        entries = sorted(os.listdir(sys_root / "bus" / "pci" / "devices" / pci_bus_id / "drm"))
    except OSError:
        return ()
    return tuple(device_node(dev_root, f"/dev/dri/{name}") for name in entries)


def by_path_links(dev_root: Path, pci_bus_id: str, nodes: tuple[DeviceNode, ...]) -> list[str]:
    """``target::link`` for the by-path links that point at one of ``nodes`` (host paths):
    the link's own target text, and the link as the host names it."""
    selected = {n.host_path for n in nodes}
    links = []
    for kind in BY_PATH_KINDS:
        link = host_path(dev_root, f"/dev/dri/by-path/pci-{pci_bus_id}-{kind}")
        try:
            target = os.readlink(link)
        except OSError:
            continue
        resolved = target if target.startswith("/") else str(PurePosixPath(link).parent / target)
        if os.path.normpath(resolved) in selected:
            links.append(f"{target}::{link}")
    return links


def has_graphics(mig_profile: str) -> bool:
    """A MIG profile with graphics, ``1g.24gb+gfx``: its attributes follow ``+``."""
    return "gfx" in mig_profile.split("+")[1:]
