"""Shared devices published once for several claims (DRA consumable capacity, KEP-5075).

A backend that offers one device several times (time-slicing or MPS replicas,
squat's ``count``) publishes each copy as a device of its own, so N claims get
N copies. Where the API server keeps ``allowMultipleAllocations`` (resource.k8s.io
v1, alpha in 1.34 behind ``DRAConsumableCapacity``), the driver can publish the
shared device once instead, with a capacity ``shares`` equal to its number of
copies that each claim consumes one of; the scheduler then lets that many
claims have it at once. This capability says which copies belong together.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from accel_plugins.plugin.device import Device


@runtime_checkable
class DraSharedUnits(Protocol):
    """Backend capability: the DRA name of the shared device ``device`` is a copy of, or None.

    Copies of one device answer the same name, a DNS label unique on the node
    (no other device may have it) and stable for the device's lifetime. The
    shared device is described as its first copy, without an attribute named
    ``replica``. Called on the event loop for every device of every tree: answer
    from ``device.facts``.
    """

    def dra_shared_unit(self, resource: str, device: Device) -> str | None: ...
