"""A device tree as the ResourceSlices of one node's pool (pure: no API calls).

Every healthy device of every resource becomes one ``resource.k8s.io/v1``
Device under its :func:`~accel_plugins.dra.model.device_names` name (the
backend's DraNamer, else a DNS label made from its ID), with
the backend's attributes (:class:`~accel_plugins.plugin.dra_attributes.DraDescriber`)
plus the framework's: ``resource`` (the device-plugin resource name, which is
what a DeviceClass per resource selects on), and ``numa`` with the standard
``resource.kubernetes.io/numaNode`` when the device sits on exactly one NUMA
node.

Shared counters (partitionable devices, KEP-4815) follow the 1.35 rules: a
slice holds devices or counter sets, never both (``sharedCounters`` in slices
of their own, at most 8 sets each, after the device slices of the same pool),
and a slice with a device that consumes counters holds at most 64 devices.

An Unhealthy device is published with a taint where the API server keeps
device taints (``taint`` given: see taints.py); elsewhere it is left out, which
every scheduler version understands, and comes back when healthy. A slice with
a tainted device holds at most 64 devices, others 128.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.models.resource_v1 import (
    Counter,
    CounterSet,
    DeviceAttribute,
    DeviceCapacity,
    DeviceCounterConsumption,
    DeviceTaint,
    ResourcePool,
    ResourceSliceSpec,
)
from lightkube.models.resource_v1 import (
    Device as KubeDevice,
)
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.utils.quantity import parse_quantity

from accel_plugins.dra.kube.shares import shared_device
from accel_plugins.dra.kube.taints import Taint
from accel_plugins.dra.model import device_names, shared_units, with_shared_units
from accel_plugins.plugin.device import Device, DeviceTree
from accel_plugins.plugin.dra_attributes import DraAttributeValue, DraDeviceInfo, DraVersion
from accel_plugins.plugin.dra_names import DraNamer, dra_device_name
from accel_plugins.plugin.dra_shares import DraSharedUnits
from accel_plugins.util.quantity import binary_si

log = logging.getLogger(__name__)

MAX_DEVICES_PER_SLICE = 128  # resource.k8s.io/v1 ResourceSliceSpec.devices
# ...when any device in the slice has taints or consumes counters
# (ResourceSliceMaxDevicesWithTaintsOrConsumesCounters, pkg/apis/resource/types.go).
MAX_TAINTED_DEVICES_PER_SLICE = 64
MAX_COUNTER_SETS_PER_SLICE = 8  # ResourceSliceMaxCounterSets
MAX_ATTRIBUTES = 32  # attributes and capacities combined, per device
MAX_STRING = 64  # a string or version attribute's length
RESOURCE_ATTRIBUTE = "resource"
NUMA_ATTRIBUTE = "numa"
# kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/deviceattribute
# (numa_linux.go): an int, left out for a device with no NUMA affinity. Any API server
# accepts the name (attribute names are qualified names; none is reserved).
STANDARD_NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"

Describe = Callable[[str, Device], DraDeviceInfo]


def _no_description(resource: str, device: Device) -> DraDeviceInfo:
    return DraDeviceInfo()


def _attribute(value: DraAttributeValue) -> DeviceAttribute:
    # bool before int: bool is an int subclass.
    if isinstance(value, bool):
        return DeviceAttribute(bool=value)
    if isinstance(value, int):
        return DeviceAttribute(int=value)
    if isinstance(value, DraVersion):
        return DeviceAttribute(version=value.value)
    return DeviceAttribute(string=value)


def _fits(name: str, value: DraAttributeValue) -> bool:
    text = value.value if isinstance(value, DraVersion) else value
    return not isinstance(text, str) or len(text) <= MAX_STRING


def kube_device(
    resource: str,
    device: Device,
    info: DraDeviceInfo,
    name: str | None = None,
    taint: Taint | None = None,
) -> KubeDevice:
    """One slice entry; attributes past the API's limits are dropped with a log line."""
    values: dict[str, DraAttributeValue] = {RESOURCE_ATTRIBUTE: resource}
    if len(device.numa_nodes) == 1:
        values[NUMA_ATTRIBUTE] = device.numa_nodes[0]
        values[STANDARD_NUMA_ATTRIBUTE] = device.numa_nodes[0]
    values.update(info.attributes)
    dropped = [name for name, value in values.items() if not _fits(name, value)]
    for name in dropped:
        del values[name]
    room = MAX_ATTRIBUTES - len(info.capacity)
    if len(values) > room:
        dropped += list(values)[room:]
        values = dict(list(values.items())[:room])
    if dropped:
        log.debug("device %s: attributes left out (API limits): %s", device.id, dropped)
    return KubeDevice(
        name=name or dra_device_name(device.id),
        attributes={name: _attribute(value) for name, value in values.items()},
        # In binary units, as NVIDIA's driver writes them (80Gi, not 85899345920): the API
        # server keeps a quantity's form, and tools show what was written.
        capacity={name: DeviceCapacity(value=binary_si(q)) for name, q in info.capacity.items()}
        or None,
        taints=[taint(resource, device)] if taint is not None and not device.healthy else None,
        consumesCounters=[
            DeviceCounterConsumption(
                counterSet=name, counters={c: Counter(value=str(v)) for c, v in used.items()}
            )
            for name, used in info.consumes.items()
        ]
        or None,
    )


def pool_devices(
    tree: DeviceTree,
    describe: Describe | None = None,
    namer: DraNamer | None = None,
    taint: Taint | None = None,
    sharer: DraSharedUnits | None = None,
) -> list[KubeDevice]:
    """The pool's devices in a stable order (resource, then device ID): Unhealthy ones
    tainted with ``taint``, or left out without it; with ``sharer``, the copies of each
    shared device published once, for several claims (shares.py).

    Named by :func:`~accel_plugins.dra.model.device_names`, the mapping the
    kubelet side reads allocation results back through (the backend's DraNamer
    when it has one; a name taken twice keeps the first device).
    """
    describe = describe or _no_description
    named = device_names(tree, namer)
    units = shared_units(named, sharer)
    chosen = with_shared_units(named, sharer)
    first_copy = {copies[0][0]: unit for unit, copies in units.items()}
    copied = {name for copies in units.values() for name, _ in copies}
    out: list[KubeDevice] = []
    for name, entry in named.items():
        if name in first_copy:
            unit = first_copy[name]
            device = chosen[unit].device
            if device.healthy or taint is not None:
                info = describe(entry.resource, device)
                kube = kube_device(entry.resource, device, info, unit, taint)
                out.append(shared_device(kube, len(units[unit])))
        elif name not in copied and (entry.device.healthy or taint is not None):
            out.append(
                kube_device(
                    entry.resource,
                    entry.device,
                    describe(entry.resource, entry.device),
                    name,
                    taint,
                )
            )
    return out


@dataclass(frozen=True)
class PoolIdentity:
    """What every slice of the node's pool carries."""

    driver: str
    node: str
    node_uid: str

    def slice_name(self, index: int) -> str:
        return f"{self.node}-{self.driver}-{index}"

    def slice_index(self, name: str) -> int | None:
        """n for a name :meth:`slice_name` made, None for any other."""
        prefix = f"{self.node}-{self.driver}-"
        tail = name[len(prefix) :] if name.startswith(prefix) else ""
        return int(tail) if tail.isdigit() and str(int(tail)) == tail else None

    def owner(self) -> OwnerReference:
        # The Node owns its slices: deleting the Node lets the garbage collector remove them.
        return OwnerReference(
            apiVersion="v1", kind="Node", name=self.node, uid=self.node_uid, controller=True
        )


def _limited(device: KubeDevice) -> bool:
    return bool(device.taints or device.consumesCounters)


def chunks(devices: list[KubeDevice]) -> list[list[KubeDevice]]:
    """Devices in order, at most 128 per slice (64 in a slice with a tainted device);
    an empty pool is one empty slice."""
    parts: list[list[KubeDevice]] = [[]]
    limited = False
    for device in devices:
        limited_now = limited or _limited(device)
        limit = MAX_TAINTED_DEVICES_PER_SLICE if limited_now else MAX_DEVICES_PER_SLICE
        if len(parts[-1]) >= limit:
            parts.append([])
            limited_now = _limited(device)
        parts[-1].append(device)
        limited = limited_now
    return parts


def counter_sets(declared: Mapping[str, Mapping[str, int]]) -> list[CounterSet]:
    """A backend's shared counters (DraCounterSets) in name order."""
    return [
        CounterSet(name=name, counters={c: Counter(value=str(v)) for c, v in sorted(sets.items())})
        for name, sets in sorted(declared.items())
    ]


def build_slices(
    identity: PoolIdentity,
    devices: list[KubeDevice],
    generation: int,
    shared: Sequence[CounterSet] = (),
) -> list[ResourceSlice]:
    """The pool at ``generation``: ``<node>-<driver>-<n>`` for n = 0..count-1, the
    device slices first, then the counter sets' own slices."""
    parts: list[tuple[list[KubeDevice] | None, list[CounterSet] | None]] = [
        (part, None) for part in chunks(devices)
    ]
    parts += [
        (None, list(shared[i : i + MAX_COUNTER_SETS_PER_SLICE]))
        for i in range(0, len(shared), MAX_COUNTER_SETS_PER_SLICE)
    ]
    return [
        ResourceSlice(
            metadata=ObjectMeta(name=identity.slice_name(i), ownerReferences=[identity.owner()]),
            spec=ResourceSliceSpec(
                driver=identity.driver,
                nodeName=identity.node,
                pool=ResourcePool(
                    name=identity.node, generation=generation, resourceSliceCount=len(parts)
                ),
                devices=part,
                sharedCounters=sets,
            ),
        )
        for i, (part, sets) in enumerate(parts)
    ]


def _quantities(values: Mapping[str, Any] | None) -> dict[str, Decimal | None]:
    # Compared by value: the form written ("80Gi" or "85899345920") may differ.
    return {name: parse_quantity(entry.get("value")) for name, entry in (values or {}).items()}


def _normal(device: dict[str, Any]) -> dict[str, Any]:
    # Quantities by value; each taint's timeAdded is stamped by the API server.
    taints = [
        {k: v for k, v in taint.items() if k != "timeAdded"} for taint in device.get("taints") or []
    ]
    consumes = [
        {**used, "counters": _quantities(used.get("counters"))}
        for used in device.get("consumesCounters") or []
    ]
    return {
        **device,
        "capacity": _quantities(device.get("capacity")),
        "taints": taints,
        "consumesCounters": consumes,
    }


def _normal_sets(sets: Iterable[CounterSet] | None) -> list[dict[str, Any]]:
    plain = [s.to_dict() for s in sets or []]
    return [{"name": s["name"], "counters": _quantities(s.get("counters"))} for s in plain]


def same_devices(first: Iterable[KubeDevice], second: Iterable[KubeDevice]) -> bool:
    """Equal as the API server would store them (quantities compared by value)."""
    return [_normal(d.to_dict()) for d in first] == [_normal(d.to_dict()) for d in second]


PROBE_DEVICE = "probe"


def probe_slice(identity: PoolIdentity) -> ResourceSlice:
    """A slice with one tainted device, for a dry-run create: does the server keep taints?"""
    device = KubeDevice(
        name=PROBE_DEVICE,
        taints=[DeviceTaint(key=f"{identity.driver}/probe", effect="NoSchedule")],
    )
    (only,) = build_slices(identity, [device], 1)
    assert only.metadata is not None
    # A name of its own: a dry-run create of an existing name is refused (409).
    only.metadata.name = None
    only.metadata.generateName = f"{identity.node}-{identity.driver}-probe-"
    return only


def probe_shares_slice(identity: PoolIdentity) -> ResourceSlice:
    """A slice with one device for several claims, for a dry-run create: does the server
    keep allowMultipleAllocations?"""
    only = probe_slice(identity)
    only.spec.devices = [shared_device(KubeDevice(name=PROBE_DEVICE), 2)]
    return only


def carry_taint_times(desired: ResourceSlice, held: Iterable[ResourceSlice]) -> None:
    """Give ``desired``'s taints the timeAdded the API server stamped on the same taint
    of the same device (else every rewrite would restamp them)."""
    stamped = {
        (device.name, taint.key, taint.value, taint.effect): taint.timeAdded
        for item in held
        for device in item.spec.devices or []
        for taint in device.taints or []
    }
    for device in desired.spec.devices or []:
        for taint in device.taints or []:
            taint.timeAdded = stamped.get((device.name, taint.key, taint.value, taint.effect))


def same_slice(held: ResourceSlice, desired: ResourceSlice) -> bool:
    """Whether the API server's ``held`` slice says what ``desired`` says.

    The spec (pool, devices) and our owner reference count; the metadata the
    server adds (resourceVersion, uid, managedFields) does not.
    """
    owners = [o.uid for o in (held.metadata.ownerReferences if held.metadata else None) or []]
    wanted = [o.uid for o in (desired.metadata.ownerReferences if desired.metadata else None) or []]
    return (
        owners == wanted
        and held.spec.pool == desired.spec.pool
        and held.spec.nodeName == desired.spec.nodeName
        and same_devices(held.spec.devices or [], desired.spec.devices or [])
        and _normal_sets(held.spec.sharedCounters) == _normal_sets(desired.spec.sharedCounters)
    )
