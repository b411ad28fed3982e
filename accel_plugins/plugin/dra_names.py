"""How a backend names its devices for DRA (ResourceSlices, allocation results).

An optional capability: without it a device is named ``dra_device_name(device.id)``
(see ``accel_plugins.dra.model``). A backend whose vendor already has a DRA driver
offers that driver's names, so claims and tools written for it read the same
(NVIDIA's names GPUs ``gpu-<minor>``), and can leave devices out of DRA
(``None``: e.g. time-slicing replicas, which DRA shares through claims instead).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from accel_plugins.plugin.device import Device


@runtime_checkable
class DraNamer(Protocol):
    """Backend capability: the DRA device name of a published device, or None to leave it out.

    The name must be a DNS label (lower case, at most 63 characters) and unique
    on the node across all resources; it must stay the same for the device's
    lifetime, since prepared claims and the checkpoint refer to it. Called on the
    event loop for every device of every tree: answer from ``device.facts``.
    """

    def dra_device_name(self, resource: str, device: Device) -> str | None: ...
