"""FPGA cards: /dev/fpgaN nodes; NUMA node and error state from /sys/class/fpga/fpgaN."""

from __future__ import annotations

import asyncio
from pathlib import Path

from accel_plugins.plugin import Device, DeviceNode, Health, Publish

RESOURCE = "example.com/fpga"


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""  # gone (unplugged) or unreadable


class FpgaBackend:
    def __init__(self, dev_root: Path, sys_root: Path, poll_interval: float = 1.0) -> None:
        self.dev_root, self.sys_root, self.poll_interval = dev_root, sys_root, poll_interval

    def card(self, node: Path) -> Device:
        sysfs = self.sys_root / "class" / "fpga" / node.name
        numa = read(sysfs / "device" / "numa_node")  # the PCI function's; -1: none
        healthy = node.is_char_device() and read(sysfs / "errors") == "0"
        return Device(
            id=node.name,
            health=Health.HEALTHY if healthy else Health.UNHEALTHY,
            numa_nodes=(int(numa),) if numa.isdigit() else (),
            nodes=(DeviceNode(f"/dev/{node.name}"),),  # the host's path, whatever dev_root is
        )

    def scan(self) -> dict[str, Device]:
        return {node.name: self.card(node) for node in sorted(self.dev_root.glob("fpga[0-9]*"))}

    async def run(self, publish: Publish) -> None:
        last: dict[str, Device] | None = None
        while True:
            cards = await asyncio.to_thread(self.scan)  # file reads stay off the event loop
            if cards != last:
                publish({RESOURCE: cards})
                last = cards
            await asyncio.sleep(self.poll_interval)
