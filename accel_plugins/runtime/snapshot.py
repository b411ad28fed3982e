"""Checks of what a backend publishes, before anything reaches the kubelet.

Only names are checked here (the kubelet refuses a bad resource name at
Register, and a device ID with whitespace or control characters breaks its
checkpoint, logs and CDI names); devices themselves are validated on
construction. IDs already checked in the previous snapshot are not checked
again, so a health flip on 10,000 devices costs a dict lookup each.
"""

from __future__ import annotations

import re

from accel_plugins.errors import InvalidSnapshotError
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.util.k8snames import resource_name_problem

_BAD_ID_CHARS = re.compile(r"[\s\x00-\x1f\x7f]")


def device_id_problem(device_id: str) -> str | None:
    """Why ``device_id`` cannot be sent to the kubelet, or None when it can."""
    bad = _BAD_ID_CHARS.search(device_id)
    if bad is not None:
        where = f"{bad.group()!r} at position {bad.start()}"
        return f"contains {where} (no whitespace or control characters)"
    try:
        device_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode ({exc.reason} at position {exc.start})"
    return None


def check_snapshot(tree: DeviceTree, previous: DeviceTree) -> None:
    """Raise InvalidSnapshotError for the first invalid resource name or new device ID."""
    for resource, devices in tree.items():
        known = previous.get(resource)
        if known is None:
            problem = resource_name_problem(resource)
            if problem is not None:
                raise InvalidSnapshotError(f"resource {resource!r}", problem)
            known = {}
        for device_id in devices:
            if device_id in known:
                continue
            problem = device_id_problem(device_id)
            if problem is not None:
                raise InvalidSnapshotError(
                    f"resource {resource!r} device {device_id!r}", f"device ID {problem}"
                )
