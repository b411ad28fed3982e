"""USB devices by vendor/product (and serial), read from sysfs as squat does.

Each USB device directory under /sys/bus/usb/devices carries idVendor,
idProduct, serial, busnum and devnum; its node is /dev/bus/usb/BBB/DDD.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from accel_plugins.backends.generic.config import UsbSpec
from accel_plugins.backends.generic.hostfs import HostPaths


@dataclass(frozen=True, slots=True)
class UsbDevice:
    vendor: int
    product: int
    serial: str
    bus: int
    address: int

    @property
    def node(self) -> str:
        return f"/dev/bus/usb/{self.bus:03d}/{self.address:03d}"


def enumerate_usb(host: HostPaths) -> list[UsbDevice]:
    root = host.sys("bus", "usb", "devices")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    found = []
    for name in names:
        device = _read_device(os.path.join(root, name))
        if device is not None:
            found.append(device)
    return found


def _read_device(path: str) -> UsbDevice | None:
    # Interfaces (1-1:1.0) and hubs' ports have no idVendor: skipped here.
    try:
        vendor = int(_read(path, "idVendor"), 16)
        product = int(_read(path, "idProduct"), 16)
        bus = int(_read(path, "busnum"))
        address = int(_read(path, "devnum"))
    except (OSError, ValueError):
        return None
    try:
        serial = _read(path, "serial")
    except OSError:
        serial = ""
    return UsbDevice(vendor, product, serial, bus, address)


def _read(path: str, name: str) -> str:
    with open(os.path.join(path, name), encoding="utf-8", errors="replace") as handle:
        return handle.read().strip()


def matching(spec: UsbSpec, devices: list[UsbDevice]) -> list[UsbDevice]:
    return [
        d
        for d in devices
        if d.vendor == spec.vendor
        and d.product == spec.product
        and (not spec.serial or d.serial == spec.serial)
    ]
