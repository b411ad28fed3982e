"""How the demo writes its walkthrough: the printer, and the helpers that format what it shows.

The printer adds section rules and echoes the kubelet's events once the walkthrough is
over; the helpers shorten device IDs and render one allocation (the container response,
plus the CDI specs the runtime would apply). Kept apart from the steps so that every step,
and the highlights, print in one voice.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from accel_plugins.kubelet_emulator import AllocationRecord
from accel_plugins.util.termstyle import PLAIN, Style


class Printer:
    """Writes lines to ``out`` at once (the demo is watched live), styled by ``style``."""

    def __init__(self, out: TextIO, style: Style = PLAIN) -> None:
        self.out = out
        self.style = style
        self.events = False  # echo the kubelet's events (while serving, after the walkthrough)

    def __call__(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def section(self, title: str) -> None:
        self()
        self(self.style.title(f"== {title} " + "=" * max(0, 66 - len(title))))

    def kubelet_event(self, line: str) -> None:
        if self.events:
            self(f"  kubelet: {line}")


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep info logs from interleaving with the walkthrough (debug stays if asked)."""
    logger = logging.getLogger("accel_plugins")
    old = logger.level
    if logger.getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(old)


def short_id(device_id: str) -> str:
    """The first 12 characters, keeping a replica suffix (`GPU-0489...::2`)."""
    base, sep, replica = device_id.partition("::")
    return base[:12] + sep + replica


def cdi_devices(directory: Path) -> dict[str, dict[str, Any]]:
    """Qualified CDI name -> its containerEdits, from the spec files in ``directory``."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        spec = json.loads(path.read_text())
        for device in spec.get("devices", []):
            found[f"{spec['kind']}={device['name']}"] = device.get("containerEdits", {})
    return found


def print_allocation(
    say: Printer, record: AllocationRecord, cdi_specs: Mapping[str, Mapping[str, Any]]
) -> None:
    """One allocation: the devices granted, then the response's nodes, mounts, envs and CDI."""
    ids = ", ".join(map(short_id, record.device_ids))
    say(f"  {record.resource} x{len(record.device_ids)}: {ids}")
    response = record.response
    for spec in response.devices:
        say(f"    device  {spec.host_path} -> {spec.container_path} ({spec.permissions})")
    for mount in response.mounts:
        ro = "ro" if mount.read_only else "rw"
        say(f"    mount   {mount.host_path} -> {mount.container_path} ({ro})")
    for name, value in sorted(response.envs.items()):
        say(f"    env     {name}={value}")
    for cdi in response.cdi_devices:
        # A CDI device is injected by the runtime from its spec, not by the response.
        say(f"    cdi     {cdi}  (the runtime applies its spec:)")
        for node in cdi_specs.get(cdi, {}).get("deviceNodes", []):
            host = node.get("hostPath", node["path"])
            say(f"      device  {host} -> {node['path']} ({node.get('permissions', 'rwm')})")
