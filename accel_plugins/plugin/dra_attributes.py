"""How a backend describes a device to DRA: attributes and capacities for ResourceSlices.

An optional capability, like the device-plugin hooks: a backend that implements
:class:`DraDescriber` gets its devices published with these attributes; one
that does not gets only the framework's own (NUMA node, health-free). The values
are plain Python, so backends never import a Kubernetes client: the DRA side
turns them into ``resource.k8s.io/v1`` ``DeviceAttribute`` and
``DeviceCapacity`` objects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from accel_plugins.plugin.device import Device

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


@dataclass(frozen=True, slots=True)
class DraVersion:
    """A ``version`` attribute (semver 2.0; CEL compares it with ``semver``)."""

    value: str

    def __post_init__(self) -> None:
        if not _SEMVER.match(self.value):
            raise ValueError(f"{self.value!r} is not a MAJOR.MINOR.PATCH semantic version")

    @classmethod
    def loose(cls, text: str) -> DraVersion:
        """``550.54.15``, ``12.4`` or ``535.104.05`` as strict semver (missing parts 0,
        leading zeros dropped: the API server rejects ``05``)."""
        parts = [p for p in text.strip().split(".") if p != ""][:3]
        if not parts or not all(p.isdigit() for p in parts):
            raise ValueError(f"{text!r} is not a dotted version")
        parts += ["0"] * (3 - len(parts))
        return cls(".".join(str(int(p)) for p in parts))


DraAttributeValue = bool | int | str | DraVersion
"""A ``resource.k8s.io/v1`` DeviceAttribute: bool, int, string (≤ 64 chars) or version."""


def _frozen(value: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True)
class DraDeviceInfo:
    """One device's attributes and capacities (integer quantities, e.g. bytes).

    Attribute names without a domain are in the driver's own domain (as
    NVIDIA's ``productName``); ``resource.kubernetes.io/pcieRoot`` and
    ``resource.kubernetes.io/pciBusID`` are the standard ones.
    """

    attributes: Mapping[str, DraAttributeValue] = field(default_factory=dict, hash=False)
    capacity: Mapping[str, int] = field(default_factory=dict, hash=False)
    # Shared counters this device uses while allocated: counter set -> counter -> amount
    # (the pool's sets come from DraCounterSets). At most 2 sets per device.
    consumes: Mapping[str, Mapping[str, int]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _frozen(self.attributes))
        object.__setattr__(self, "capacity", _frozen(self.capacity))
        object.__setattr__(
            self, "consumes", _frozen({k: _frozen(v) for k, v in self.consumes.items()})
        )


@runtime_checkable
class DraDescriber(Protocol):
    """Backend capability: DRA attributes and capacities of a published device.

    Called for every device of every tree published in DRA mode, on the event
    loop: answer from ``device.facts`` and what the backend already read, never
    from slow I/O.
    """

    def dra_device(self, resource: str, device: Device) -> DraDeviceInfo: ...


@runtime_checkable
class DraCounterSets(Protocol):
    """Backend capability: the shared counters of the node's pool (partitionable devices).

    Counter set name (a DNS label, e.g. one per physical card) -> counter name
    -> its total (e.g. memory slices). Devices that share hardware say what they
    use of it in :attr:`DraDeviceInfo.consumes`, and the scheduler never hands
    out more than a set holds. Called with every published tree, on the event loop.
    """

    def dra_counter_sets(self) -> Mapping[str, Mapping[str, int]]: ...


# The attributes Kubernetes itself defines (k8s.io/dynamic-resource-allocation/deviceattribute):
# a DeviceClass or a claim's matchAttribute can align devices of different drivers on them.
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")


def pcie_root(sys_device: Path, sys_root: Path = Path("/sys")) -> str | None:
    """The PCIe root complex (``pci0000:3a``) of a sysfs device, None when not on PCI.

    ``sys_device`` is any sysfs path of the device (``/sys/bus/pci/devices/<bdf>``,
    ``/sys/dev/char/<major>:<minor>``); its resolved path under
    ``<sys_root>/devices`` starts with the root complex when it sits on PCI.
    """
    try:
        resolved = sys_device.resolve(strict=True)
        inside = resolved.relative_to((sys_root / "devices").resolve())
    except (OSError, ValueError):
        return None
    first = inside.parts[0] if inside.parts else ""
    return first if first.startswith("pci") else None


def pci_function(sys_device: Path) -> str | None:
    """The PCI function (``0000:3b:00.0``) a sysfs class device belongs to, None when it
    is not a PCI function's own (a USB serial's ``device`` is its USB interface)."""
    try:
        name = (sys_device / "device").resolve(strict=True).name.lower()
    except OSError:
        return None
    return name if _BDF.match(name) else None


def pci_attributes(bus_id: str, sys_root: Path = Path("/sys")) -> dict[str, DraAttributeValue]:
    """The standard PCI attributes of a PCI function (``0000:3b:00.0``), as far as known."""
    bdf = bus_id.strip().lower()
    if not _BDF.match(bdf):
        return {}
    out: dict[str, DraAttributeValue] = {PCI_BUS_ID: bdf}
    root = pcie_root(sys_root / "bus" / "pci" / "devices" / bdf, sys_root)
    if root is not None:
        out[PCIE_ROOT] = root
    return out
