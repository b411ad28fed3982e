"""Real libudev, fake hardware: the generic backend under umockdev.

The backend runs in a child process under ``umockdev-wrapper`` (see
tests/support/umockdev_harness.py), where libudev enumerates the testbed's sysfs and
receives its uevents over netlink. The anchor rescan is set to an hour, so
every change seen here travelled as a uevent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.generic.discovery import device_id
from accel_plugins.kubelet_emulator import Kubelet
from tests.fixtures.generic import UmockdevHarness

PCI = "/devices/pci0000:00/0000:00:14.0"
CH340 = f"{PCI}/usb1/1-2"
CH340_TTY = f"{CH340}/1-2:1.0/ttyUSB0/tty/ttyUSB0"
CARD = f"{PCI}/usb1/1-3/1-3:1.0/sound/card1"
FTDI = f"{PCI}/usb1/1-4"
FTDI_TTY = f"{FTDI}/1-4:1.0/ttyUSB1/tty/ttyUSB1"

MACHINE = f"""
P: {PCI}
E: SUBSYSTEM=pci
A: numa_node=1

P: {CH340}
N: bus/usb/001/004
E: SUBSYSTEM=usb
E: DEVTYPE=usb_device
E: DEVNAME=/dev/bus/usb/001/004
A: idVendor=1a86
A: idProduct=7523
A: busnum=1
A: devnum=4
A: dev=189:3

P: {CH340}/1-2:1.0
E: SUBSYSTEM=usb
E: DEVTYPE=usb_interface

P: {CH340_TTY}
N: ttyUSB0
E: SUBSYSTEM=tty
E: DEVNAME=/dev/ttyUSB0
A: dev=188:0

P: {PCI}/usb1/1-3
E: SUBSYSTEM=usb
E: DEVTYPE=usb_device
A: idVendor=0d8c
A: idProduct=0014

P: {PCI}/usb1/1-3/1-3:1.0
E: SUBSYSTEM=usb
E: DEVTYPE=usb_interface

P: {CARD}
E: SUBSYSTEM=sound

P: {CARD}/controlC1
N: snd/controlC1
E: SUBSYSTEM=sound
E: DEVNAME=/dev/snd/controlC1
A: dev=116:10

P: {CARD}/pcmC1D0p
N: snd/pcmC1D0p
E: SUBSYSTEM=sound
E: DEVNAME=/dev/snd/pcmC1D0p
A: dev=116:11

P: {CARD}/pcmC1D0c
N: snd/pcmC1D0c
E: SUBSYSTEM=sound
E: DEVNAME=/dev/snd/pcmC1D0c
A: dev=116:12

P: /devices/virtual/misc/kvm
N: kvm
E: SUBSYSTEM=misc
E: DEVNAME=/dev/kvm
A: dev=10:232
"""

FTDI_RECORD = f"""
P: {FTDI}
E: SUBSYSTEM=usb
E: DEVTYPE=usb_device
A: idVendor=0403
A: idProduct=6001
A: serial=A50285BI

P: {FTDI}/1-4:1.0
E: SUBSYSTEM=usb
E: DEVTYPE=usb_interface

P: {FTDI_TTY}
N: ttyUSB1
E: SUBSYSTEM=tty
E: DEVNAME=/dev/ttyUSB1
E: ID_MODEL=FT232R_USB_UART
A: dev=188:1
"""

ENUMERATION_CONFIG = """
devices:
  - name: ch340
    groups:
      - udev:
          - {subsystem: tty, attributes: {idVendor: "1a86", idProduct: "7523"},
             mountPath: /dev/serial/, permissions: rw}
  - name: card
    groups:
      - count: 2
        udev:
          - {subsystem: sound, kernel: "controlC*", attributes: {idVendor: "0d8c"}}
          - {subsystem: sound, kernel: "pcmC*", attributes: {idVendor: "0d8c"}}
  - name: kvm
    groups:
      - count: 2
        udev: [{subsystem: misc, kernel: kvm, permissions: rw}]
  - name: ftdi
    groups:
      - udev: [{properties: {ID_MODEL: "FT232R*"}}]
  - name: ch340-usb
    groups:
      - usb: [{vendor: "1a86", product: "7523"}]
"""

CARD_NODES = ["/dev/snd/controlC1", "/dev/snd/pcmC1D0c", "/dev/snd/pcmC1D0p"]

Tree = dict[str, dict[str, dict[str, Any]]]


def resource(name: str) -> str:
    return f"accel-plugins.io/{name}"


async def test_enumeration_with_matchers(umockdev_harness: UmockdevHarness) -> None:
    await umockdev_harness.add(MACHINE)
    await umockdev_harness.start(ENUMERATION_CONFIG)
    tree = await umockdev_harness.wait_for_tree(lambda t: True)
    assert tree[resource("ch340")] == {
        device_id(0, ["/dev/ttyUSB0"]): {
            "health": "Healthy",
            "nodes": [["/dev/ttyUSB0", "/dev/serial/ttyUSB0", "rw"]],
            "numa": [1],  # from the PCI controller two levels up
        }
    }
    card = {n: n for n in CARD_NODES}
    assert tree[resource("card")] == {
        device_id(replica, CARD_NODES): {
            "health": "Healthy",
            "nodes": [[n, card[n], "mrw"] for n in CARD_NODES],
            "numa": [1],
        }
        for replica in (0, 1)
    }
    assert sorted(tree[resource("kvm")]) == sorted(device_id(r, ["/dev/kvm"]) for r in (0, 1))
    assert tree[resource("ftdi")] == {}
    assert tree[resource("ch340-usb")] == {
        device_id(0, ["/dev/bus/usb/001/004"]): {
            "health": "Healthy",
            "nodes": [["/dev/bus/usb/001/004", "/dev/bus/usb/001/004", "rw"]],
            "numa": [1],
        }
    }


HOTPLUG_CONFIG = """
devices:
  - name: ftdi
    groups:
      - udev: [{subsystem: tty, attributes: {idVendor: "0403", serial: "A50285BI"}}]
"""
FTDI_ID = device_id(0, ["/dev/ttyUSB1"])


@pytest.mark.parametrize("source", ["kernel", "udev"])
async def test_uevents_reach_the_kubelet(
    umockdev_harness: UmockdevHarness, kubelet: Kubelet, kubelet_dir: Path, source: str
) -> None:
    name = resource("ftdi")
    await umockdev_harness.add(MACHINE)
    await umockdev_harness.start(HOTPLUG_CONFIG, udev_source=source, plugin_dir=kubelet_dir)
    await kubelet.wait_for_resource(name, timeout=20)
    assert kubelet.resources[name].capacity == 0

    await umockdev_harness.add(FTDI_RECORD, uevent=f"/sys{FTDI_TTY}")  # plugged in
    await kubelet.wait_for_resource(name, allocatable=1)
    record = await kubelet.allocate("pod", "main", name, 1)
    assert record.device_ids == (FTDI_ID,)

    # A change event on the USB parent: its serial no longer matches.
    await umockdev_harness.set_attribute(f"/sys{FTDI}", "serial", "SOMEONE-ELSE")
    await kubelet.wait_for(lambda k: k.resources[name].unhealthy == [FTDI_ID])
    await umockdev_harness.set_attribute(f"/sys{FTDI}", "serial", "A50285BI")
    await kubelet.wait_for_resource(name, allocatable=1)

    await umockdev_harness.remove(f"/sys{FTDI_TTY}")  # unplugged
    await kubelet.wait_for(lambda k: k.resources[name].unhealthy == [FTDI_ID])
