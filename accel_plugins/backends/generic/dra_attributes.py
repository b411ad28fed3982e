"""Generic devices as DRA devices: path, udev properties, vendor and product IDs.

Per device: ``path`` (its first device node on the host, or its first mount),
``paths`` (how many host paths it is made of), ``replica`` (which of a
shareable unit's copies), the standard ``resource.kubernetes.io/pcieRoot``
when the node's hardware sits on PCI and ``resource.kubernetes.io/pciBusID``
when the node is a PCI function's own (its ``/sys/dev/char/<major>:<minor>/device``
is that function), and from the udev database
(``/run/udev/data/c<major>:<minor>``, what ``udevadm info`` reads) the
properties in :data:`UDEV_PROPERTIES` under their udev names, plus
``vendorID`` and ``productID`` (lower-case hex, USB's ``ID_VENDOR_ID`` /
``ID_MODEL_ID`` or PCI's ``PCI_ID``). Reads a few small files per device, so
it runs where the tree is published, not at every scan.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from accel_plugins.backends.generic.discovery import UnitFacts
from accel_plugins.backends.generic.hostfs import UDEV_DATA, HostPaths
from accel_plugins.plugin.device import Device
from accel_plugins.plugin.dra_attributes import (
    PCI_BUS_ID,
    PCIE_ROOT,
    DraAttributeValue,
    DraDeviceInfo,
    pci_function,
    pcie_root,
)

# Properties worth selecting on, and short enough to stay within the 32 attributes
# and 64 characters the API allows; their udev names are valid attribute names.
UDEV_PROPERTIES = (
    "SUBSYSTEM",
    "ID_BUS",
    "ID_VENDOR",
    "ID_VENDOR_ID",
    "ID_MODEL",
    "ID_MODEL_ID",
    "ID_SERIAL",
    "ID_SERIAL_SHORT",
    "ID_PATH",
    "ID_PATH_TAG",
    "ID_USB_DRIVER",
    "ID_USB_INTERFACE_NUM",
    "DRIVER",
    "PCI_ID",
    "PCI_SLOT_NAME",
)


def _rdev(local: str) -> tuple[str, int, int] | None:
    try:
        info = os.stat(local)
    except OSError:
        return None
    if stat.S_ISCHR(info.st_mode):
        return "c", os.major(info.st_rdev), os.minor(info.st_rdev)
    if stat.S_ISBLK(info.st_mode):
        return "b", os.major(info.st_rdev), os.minor(info.st_rdev)
    return None


def udev_properties(data_file: Path) -> dict[str, str]:
    """The ``E:KEY=VALUE`` lines of a udev database file (empty when unreadable)."""
    try:
        text = data_file.read_text(errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("E:"):
            key, _, value = line[2:].partition("=")
            out[key] = value
    return out


def _ids(properties: dict[str, str]) -> dict[str, DraAttributeValue]:
    vendor, product = properties.get("ID_VENDOR_ID"), properties.get("ID_MODEL_ID")
    if not (vendor and product) and ":" in properties.get("PCI_ID", ""):
        vendor, product = properties["PCI_ID"].split(":", 1)
    out: dict[str, DraAttributeValue] = {}
    if vendor:
        out["vendorID"] = vendor.lower()
    if product:
        out["productID"] = product.lower()
    return out


def describe(device: Device, host: HostPaths, udev_data: Path = UDEV_DATA) -> DraDeviceInfo:
    attributes: dict[str, DraAttributeValue] = {}
    paths = [n.host_path for n in device.nodes] + [m.host_path for m in device.mounts]
    if paths:
        attributes["path"] = paths[0]
        attributes["paths"] = len(paths)
    if isinstance(device.facts, UnitFacts):
        attributes["replica"] = device.facts.replica
    if device.nodes:
        found = _rdev(host.local(device.nodes[0].host_path))
        if found is not None:
            kind, major, minor = found
            sys_kind = "char" if kind == "c" else "block"
            sys_device = Path(host.sys("dev", sys_kind, f"{major}:{minor}"))
            root = pcie_root(sys_device, host.sys_root)
            if root is not None:
                attributes[PCIE_ROOT] = root
            bus_id = pci_function(sys_device)
            if bus_id is not None:
                attributes[PCI_BUS_ID] = bus_id
            properties = udev_properties(udev_data / f"{kind}{major}:{minor}")
            attributes.update(_ids(properties))
            attributes.update({k: properties[k] for k in UDEV_PROPERTIES if properties.get(k)})
    return DraDeviceInfo(attributes=attributes)
