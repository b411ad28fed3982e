"""Shared devices published once for several claims (DRA consumable capacity, KEP-5075).

A backend that offers one device several times (time-slicing or MPS replicas,
squat's ``count``) publishes each copy as a device of its own, so N claims get
N copies. Where the API server keeps ``allowMultipleAllocations`` (resource.k8s.io
v1, alpha in 1.34 behind ``DRAConsumableCapacity``), the driver can publish the
shared device once instead, with a capacity ``shares`` equal to its number of
copies that a claim consumes one or more of; the scheduler then lets claims
have it together while shares are left. :class:`DraSharedUnits` says which copies
belong together; :class:`DraShareLimits`, optional, holds a share to its part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from accel_plugins.plugin.device import Device

SHARES = "shares"  # the capacity a shared device is published with, one per copy


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


@dataclass(frozen=True, slots=True)
class Share:
    """A claim's share of a shared device: ``shares`` of its ``of`` (its consumed
    ``shares`` capacity, of the capacity the device was published with), and every
    capacity it consumed as the scheduler wrote it (``memory``: ``"23034Mi"``)."""

    shares: int
    of: int
    consumed: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class DraShareLimits(Protocol):
    """Backend capability: environment variables that keep a share's containers to their
    part of the device (NVIDIA: MPS client limits), or none where the backend cannot.

    Called in a worker thread with the hook timeout, like ``allocate``, for the copy the
    share is prepared from. A claim's own settings (opaque parameters) win over these.
    """

    def dra_share_env(
        self, resource: str, devices: Sequence[Device], share: Share
    ) -> Mapping[str, str]: ...
