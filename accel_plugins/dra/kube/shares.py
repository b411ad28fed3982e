"""Several claims on one shared device: consumable capacity (KEP-5075, ``DRAConsumableCapacity``).

Where the API server keeps ``allowMultipleAllocations`` on a slice's device
(resource.k8s.io v1; alpha and off by default in 1.34, dropped without an error
where the gate is off, as ``dropDisabledFields`` does), the copies of a shared
device (time-slicing or MPS replicas, squat's ``count``: the backend's
DraSharedUnits) are published as one device the scheduler may allocate to
several claims at once: ``allowMultipleAllocations: true`` and a capacity
``shares`` of one per copy, each claim consuming one (``requestPolicy``:
``default`` 1, ``validValues`` [1]). Elsewhere the copies stay devices of their
own, one claim each, as before. ``auto`` asks the API server once with a
dry-run create, like the taints (taints.py).

Validation facts from kubernetes/kubernetes pkg/apis/resource/validation/validation.go
(``validateMultiAllocatableDeviceCapacity``, ``validateRequestPolicy``: a
``requestPolicy`` only with ``allowMultipleAllocations``, ``validValues`` needs a
``default`` among them, not above the capacity's value).
"""

from __future__ import annotations

import copy
import enum

from lightkube.models.resource_v1 import CapacityRequestPolicy, DeviceCapacity
from lightkube.models.resource_v1 import Device as KubeDevice

SHARES = "shares"
REPLICA_ATTRIBUTE = "replica"  # one copy's, not the shared device's


class ShareMode(enum.StrEnum):
    """Where shared devices are published once for several claims."""

    AUTO = "auto"  # where the API server keeps allowMultipleAllocations (asked once)
    ON = "on"
    OFF = "off"


def shares_capacity(copies: int) -> DeviceCapacity:
    """``copies`` shares, one taken by each claim."""
    return DeviceCapacity(
        value=str(copies), requestPolicy=CapacityRequestPolicy(default="1", validValues=["1"])
    )


def shared_device(device: KubeDevice, copies: int) -> KubeDevice:
    """``device`` (its first copy's entry, named after the shared device) for several claims."""
    shared = copy.copy(device)
    attributes = {k: v for k, v in (device.attributes or {}).items() if k != REPLICA_ATTRIBUTE}
    shared.attributes = attributes or None
    shared.allowMultipleAllocations = True
    shared.capacity = {**(device.capacity or {}), SHARES: shares_capacity(copies)}
    return shared
