"""How a backend names its devices for DRA (ResourceSlices, allocation results).

An optional capability: without it a device is named ``dra_device_name(device.id)``
(below). A backend whose vendor already has a DRA driver
offers that driver's names, so claims and tools written for it read the same
(NVIDIA's names GPUs ``gpu-<minor>``), and can leave devices out of DRA
(``None``: e.g. time-slicing replicas, which DRA shares through claims instead).
"""

from __future__ import annotations

import hashlib
import re
from typing import Protocol, runtime_checkable

from accel_plugins.plugin.device import Device

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NOT_LABEL_CHARS = re.compile(r"[^a-z0-9-]+")
_HASH_LEN = 8


@runtime_checkable
class DraNamer(Protocol):
    """Backend capability: the DRA device name of a published device, or None to leave it out.

    The name must be a DNS label (lower case, at most 63 characters) and unique
    on the node across all resources; it must stay the same for the device's
    lifetime, since prepared claims and the checkpoint refer to it. Called on the
    event loop for every device of every tree: answer from ``device.facts``.
    """

    def dra_device_name(self, resource: str, device: Device) -> str | None: ...


def dra_device_name(device_id: str) -> str:
    """A DNS label naming ``device_id`` in ResourceSlices and allocation results.

    An ID that already is a label is kept. Otherwise it is lowercased, runs of
    other characters become ``-``, and a short hash of the original ID is
    appended, so two IDs that differ only in case or punctuation stay apart.
    """
    if _DNS_LABEL.match(device_id):
        return device_id
    digest = hashlib.sha256(device_id.encode()).hexdigest()[:_HASH_LEN]
    stem = _NOT_LABEL_CHARS.sub("-", device_id.lower()).strip("-")
    stem = stem[: 63 - _HASH_LEN - 1].rstrip("-")
    return f"{stem}-{digest}" if stem else f"d-{digest}"
