"""Several claims on one shared device: consumable capacity (KEP-5075, ``DRAConsumableCapacity``).

Where the API server keeps ``allowMultipleAllocations`` on a slice's device
(resource.k8s.io v1; alpha and off by default in 1.34, dropped without an error
where the gate is off, as ``dropDisabledFields`` does), the copies of a shared
device (time-slicing or MPS replicas, squat's ``count``: the backend's
DraSharedUnits) are published as one device the scheduler may allocate to
several claims at once: ``allowMultipleAllocations: true`` and a capacity
``shares`` of one per copy, each claim consuming one by default and more where it
asks (``capacity.requests.shares``; ``requestPolicy``: ``default`` 1, ``validRange``
from 1 in steps of 1): a claim's part of the device is its shares over the
device's, which the backend applies where it can (NVIDIA MPS limits,
claim_answer.py). Elsewhere the copies stay devices of their
own, one claim each, as before. ``auto`` asks the API server once with a
dry-run create, like the taints (taints.py).

Validation facts from kubernetes/kubernetes pkg/apis/resource/validation/validation.go
(``validateMultiAllocatableDeviceCapacity``, ``validateRequestPolicy``: a
``requestPolicy`` only with ``allowMultipleAllocations``, ``validValues`` needs a
``default`` among them, a ``validRange`` its ``min`` and ``default`` within it, neither
above the capacity's value).
"""

from __future__ import annotations

import copy
import enum

from lightkube.models.resource_v1 import (
    CapacityRequestPolicy,
    CapacityRequestPolicyRange,
    DeviceCapacity,
)
from lightkube.models.resource_v1 import Device as KubeDevice

from accel_plugins.plugin.dra_shares import SHARES
from accel_plugins.util.quantity import binary_si, parse_quantity

REPLICA_ATTRIBUTE = "replica"  # one copy's, not the shared device's


class ShareMode(enum.StrEnum):
    """Where shared devices are published once for several claims."""

    AUTO = "auto"  # where the API server keeps allowMultipleAllocations (asked once)
    ON = "on"
    OFF = "off"


def shares_capacity(copies: int) -> DeviceCapacity:
    """``copies`` shares, one taken by a claim unless it asks for more."""
    return DeviceCapacity(
        value=str(copies),
        requestPolicy=CapacityRequestPolicy(
            default="1", validRange=CapacityRequestPolicyRange(min="1", step="1")
        ),
    )


def per_share(capacity: DeviceCapacity, copies: int) -> DeviceCapacity:
    """Another capacity of a shared device (NVIDIA's ``memory``) taken a share at a time.

    A capacity with no ``requestPolicy`` on a device several claims hold is consumed
    whole by each of them (KEP-5075; types.go ``CapacityRequestPolicy``: "If not set,
    ... the full capacity value"), so a second claim would never fit: each share takes
    its part by default (``value / copies``, rounded down), and a claim may ask for
    whole multiples of it.
    """
    if capacity.requestPolicy is not None:
        return capacity
    try:
        part = int(parse_quantity(capacity.value) / copies)
    except ValueError:
        return capacity
    if part < 1:
        return capacity
    step = binary_si(part)
    return DeviceCapacity(
        value=capacity.value,
        requestPolicy=CapacityRequestPolicy(
            default=step, validRange=CapacityRequestPolicyRange(min=step, step=step)
        ),
    )


def shared_device(device: KubeDevice, copies: int) -> KubeDevice:
    """``device`` (its first copy's entry, named after the shared device) for several claims."""
    shared = copy.copy(device)
    attributes = {k: v for k, v in (device.attributes or {}).items() if k != REPLICA_ATTRIBUTE}
    shared.attributes = attributes or None
    shared.allowMultipleAllocations = True
    others = {name: per_share(c, copies) for name, c in (device.capacity or {}).items()}
    shared.capacity = {**others, SHARES: shares_capacity(copies)}
    return shared
