"""The contract between the DRA driver's kubelet side and its API side.

The kubelet side (the ``DRAPlugin`` gRPC service, prepare/unprepare, the
checkpoint) asks a :class:`ClaimSource` what a claim was allocated; the API
side (ResourceClaims and ResourceSlices through a Kubernetes client) answers
it and publishes the node's devices with a :class:`SlicePublisher`. Neither
side imports the other: both meet here.

Device IDs become DRA device names (DNS labels, at most 63 characters) with
:func:`dra_device_name`; the mapping is deterministic, so the name in a
claim's allocation result leads back to the device the backend published.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from accel_plugins.errors import AccelPluginsError
from accel_plugins.plugin.device import Device, DeviceTree
from accel_plugins.plugin.dra_names import DraNamer, dra_device_name
from accel_plugins.plugin.dra_shares import DraSharedUnits
from accel_plugins.plugin.dra_taints import DeviceToleration

log = logging.getLogger(__name__)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ClaimError(AccelPluginsError):
    """One claim cannot be prepared; its message goes in that claim's ``error``.

    ``logged`` is true when the failure was logged where it happened (a backend hook,
    by the runtime's hook rule), so the claim's own line is not written again.
    """

    def __init__(self, message: str, *, logged: bool = False) -> None:
        super().__init__(message)
        self.logged = logged


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it in NodePrepareResources."""

    uid: str
    namespace: str
    name: str


@dataclass(frozen=True)
class AllocatedDevice:
    """One entry of a claim's ``status.allocation.devices.results`` for our driver."""

    request: str
    driver: str
    pool: str
    device: str  # the DRA device name (see dra_device_name)
    # The claim's tolerations of this device's taints (what let the scheduler pick a
    # tainted device): Prepare honours them too.
    tolerations: tuple[DeviceToleration, ...] = ()
    # Which share of a device allocated to several claims (KEP-5075 ``shareID``), and
    # the capacity this share consumes (``consumedCapacity``, quantities as written).
    share_id: str = ""
    consumed: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # KEP-5018 ``adminAccess``: a monitor's access, beside whoever holds the device.
    admin_access: bool = False


@dataclass(frozen=True)
class OpaqueConfig:
    """One entry of a claim's ``status.allocation.devices.config`` for our driver.

    ``parameters`` is the opaque JSON object as the claim or its DeviceClass
    wrote it; ``requests`` empty means every request of the claim. ``source``
    is ``FromClass`` or ``FromClaim``; ``index`` is the entry's place in the
    list, so an error can say which one is wrong.
    """

    parameters: Mapping[str, object]
    requests: tuple[str, ...] = ()
    source: str = "FromClaim"
    index: int = 0

    def applies_to(self, request: str) -> bool:
        """A config naming ``gpu`` applies to its subrequests (``gpu/large``) too."""
        return not self.requests or any(
            request == r or request.startswith(f"{r}/") for r in self.requests
        )

    @property
    def where(self) -> str:
        return f"status.allocation.devices.config[{self.index}].opaque.parameters"


@dataclass(frozen=True)
class ResolvedClaim:
    """A claim read from the API server: its allocation results for this driver and pool,
    the opaque configs for this driver, in the order they apply (class, then claim;
    a later one wins), and the pods it is reserved for."""

    ref: ClaimRef
    devices: tuple[AllocatedDevice, ...]
    configs: tuple[OpaqueConfig, ...] = ()
    # The pods the claim is reserved for (status.reservedFor): who holds its devices.
    consumers: tuple[str, ...] = ()


class ClaimSource(Protocol):
    """Reads a ResourceClaim and returns its results for ``driver`` in ``pool``.

    Raises :class:`ClaimError` when the claim is missing, its UID differs from
    the one the kubelet gave, or it is not allocated; other errors (the API
    server unreachable) propagate as they are.
    """

    async def resolve(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim: ...


@dataclass(frozen=True)
class DeviceReport:
    """A prepared device as a claim's ``status.devices`` entry names it: its result's
    pool, DRA name and share, and the backend's device behind it."""

    pool: str
    device: str
    share_id: str
    resource: str
    backend_device: Device
    admin: bool = False


@runtime_checkable
class ClaimStatusSink(Protocol):
    """Optional beside a :class:`ClaimSource`: told what each claim was prepared with,
    and when it was unprepared, to say so in the claim's status. Never raises: a claim
    whose status cannot be written is prepared all the same."""

    def claim_prepared(self, claim: ClaimRef, devices: Sequence[DeviceReport]) -> None: ...

    def claim_unprepared(self, claim: ClaimRef) -> None: ...


class SlicePublisher(Protocol):
    """Keeps the node's ResourceSlices equal to the backend's device tree.

    ``publish`` is called with every new tree (hotplug, removal, health) and
    returns once the API server has it or the attempt failed (retried with
    backoff in the background, never raising into the caller). ``attributes``
    maps each resource to the per-device attribute/capacity source.
    """

    async def publish(self, tree: DeviceTree) -> None: ...

    async def close(self) -> None: ...


AttributeValue = bool | int | str
Attributes = Mapping[str, AttributeValue]


@dataclass(frozen=True)
class NamedDevice:
    """A device of the backend's tree under its DRA name; for a shared device, its first
    healthy copy and how many copies the device has (its capacity of shares)."""

    resource: str
    device: Device
    copies: int = 1


def device_names(tree: DeviceTree, namer: DraNamer | None = None) -> dict[str, NamedDevice]:
    """DRA device name -> the device it names, for every device of ``tree`` in DRA.

    Both sides use this one mapping: the API side publishes these names, the
    kubelet side maps allocation results back through them. Names come from
    the backend's :class:`DraNamer` when it has one (``None`` leaves a device
    out), else from :func:`dra_device_name`. Resources are visited in sorted
    order and IDs in sorted order, so when two devices get the same name the
    same one wins every time; the other is left out, with an error logged.
    """
    named: dict[str, NamedDevice] = {}
    for resource in sorted(tree):
        devices = tree[resource]
        for device_id in sorted(devices):
            device = devices[device_id]
            name = (
                namer.dra_device_name(resource, device)
                if namer is not None
                else dra_device_name(device_id)
            )
            if name is None:
                continue
            if not _DNS_LABEL.match(name):
                log.error(
                    "resource %s device %s: DRA name %r is not a DNS label; left out of DRA",
                    resource,
                    device_id,
                    name,
                )
                continue
            first = named.get(name)
            if first is not None:
                log.error(
                    "resource %s device %s: DRA name %r is taken by %s device %s; left out of DRA",
                    resource,
                    device_id,
                    name,
                    first.resource,
                    first.device.id,
                )
                continue
            named[name] = NamedDevice(resource, device)
    return named


def shared_units(
    named: Mapping[str, NamedDevice], sharer: DraSharedUnits | None
) -> dict[str, list[tuple[str, NamedDevice]]]:
    """Shared device name -> its copies (name, device), in ``named``'s order.

    Copies of one resource only; a name that is also a device's name is left
    out (its copies stay devices of their own), with an error logged.
    """
    units: dict[str, list[tuple[str, NamedDevice]]] = {}
    if sharer is None:
        return units
    for name, entry in named.items():
        unit = sharer.dra_shared_unit(entry.resource, entry.device)
        if unit is None:
            continue
        if unit in named or not _DNS_LABEL.match(unit):
            log.error(
                "resource %s device %s: shared device name %r is taken or no DNS label; "
                "its copies stay devices of their own",
                entry.resource,
                entry.device.id,
                unit,
            )
            continue
        copies = units.setdefault(unit, [])
        if copies and copies[0][1].resource != entry.resource:
            log.error("shared device %r spans resources; left as copies", unit)
            continue
        copies.append((name, entry))
    return units


def with_shared_units(
    named: Mapping[str, NamedDevice], sharer: DraSharedUnits | None
) -> dict[str, NamedDevice]:
    """``named`` plus each shared device's name leading to its first healthy copy (else its
    first): what a claim allocated the shared device is prepared from, copies being alike."""
    out = dict(named)
    for unit, copies in shared_units(named, sharer).items():
        healthy = [entry for _, entry in copies if entry.device.healthy]
        first = (healthy or [copies[0][1]])[0]
        out[unit] = NamedDevice(first.resource, first.device, len(copies))
    return out
