"""CDI (Container Device Interface) spec files, one per resource.

With ``--cdi-spec-dir`` set, each resource ``<domain>/<name>`` gets the file
``<dir>/<domain>-<name>.json``: kind ``<domain>/<name>``, one CDI device per
device ID carrying its device nodes and mounts. Allocate responses then name
``<domain>/<name>=<id>`` so a CDI-aware runtime injects the same edits. Files
are written to a temporary name and renamed, so a runtime never reads half
a spec.

A CDI ``deviceNodes`` entry must be a device node (the CDI library refuses a
directory), so a directory path (``/dev/snd``) is listed as the nodes inside
it: ``expand`` (devdir.expand with the host's paths) names them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from accel_plugins.fsutil import atomic_write_text
from accel_plugins.plugin.device import Device, DeviceNode

CDI_VERSION = "0.5.0"  # the first with deviceNodes[].hostPath

Expand = Callable[[DeviceNode], Sequence[DeviceNode]]
"""The device nodes a runtime creates for one node (a directory: the nodes inside)."""


def _as_is(node: DeviceNode) -> Sequence[DeviceNode]:
    return (node,)


def qualified_name(kind: str, device_id: str) -> str:
    return f"{kind}={device_id}"


def spec_path(directory: Path, kind: str) -> Path:
    return directory / (kind.replace("/", "-") + ".json")


def build_spec(kind: str, devices: Mapping[str, Device], expand: Expand = _as_is) -> dict[str, Any]:
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind,
        "devices": [
            _device(device_id, devices[device_id], expand) for device_id in sorted(devices)
        ],
    }


def _device(device_id: str, device: Device, expand: Expand) -> dict[str, Any]:
    edits: dict[str, Any] = {}
    nodes = [inner for n in device.nodes for inner in expand(n)]
    if nodes:
        edits["deviceNodes"] = [
            {"path": n.container_path, "hostPath": n.host_path, "permissions": n.permissions}
            for n in nodes
        ]
    if device.mounts:
        edits["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["bind", "ro"] if m.read_only else ["bind"],
            }
            for m in device.mounts
        ]
    return {"name": device_id, "containerEdits": edits}


def write_spec(
    directory: Path, kind: str, devices: Mapping[str, Device], expand: Expand = _as_is
) -> Path:
    """Write (atomically replace) the spec file of one resource; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = spec_path(directory, kind)
    text = json.dumps(build_spec(kind, devices, expand), indent=2, sort_keys=True) + "\n"
    atomic_write_text(target, text)
    return target


def sync_spec(
    directory: Path, kind: str, devices: Mapping[str, Device], expand: Expand = _as_is
) -> Path | None:
    """Write the spec, or remove it when the resource has no devices (CDI wants one)."""
    if devices:
        return write_spec(directory, kind, devices, expand)
    with contextlib.suppress(FileNotFoundError):
        spec_path(directory, kind).unlink()
    return None
