"""How a backend keys the DRA device taint of an Unhealthy device (optional capability).

A DRA driver that publishes device taints (KEP-5055, ``DRADeviceTaints``) marks an
Unhealthy device with the key ``<driver>/unhealthy`` unless the backend names a
vendor key for the device's reason, e.g. ``gpu.nvidia.com/xid`` for an XID error,
so that a claim can tolerate one kind of fault and not the others.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from accel_plugins.plugin.device import Device


@runtime_checkable
class DraTaintKeyer(Protocol):
    """Backend capability: the taint key for an Unhealthy device, or None for the default.

    The key must be a label name (an optional DNS-subdomain prefix and ``/``,
    then at most 63 characters). Called on the event loop for every Unhealthy
    device of every tree: answer from ``device.reason``.
    """

    def dra_taint_key(self, resource: str, device: Device) -> str | None: ...
