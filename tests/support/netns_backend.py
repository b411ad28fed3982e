"""Runs the generic backend in this process's network namespace; reports as JSON lines.

tests/e2e/test_generic_netns.py starts it as ``unshare --net python -m
tests.support.netns_backend SETTINGS_JSON``, a network namespace of its own as a pod
without hostNetwork has. It prints every tree the backend publishes
(``{"tree": {resource: [ids]}, "at": monotonic seconds}``; CLOCK_MONOTONIC
is the same in every process), each finished scan (``{"scanned": n}``) and
the backend's log lines (``{"log": ...}``) until it is killed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.eventsource import EventPaths, UdevSource
from accel_plugins.plugin.device import Device, DeviceTree


def say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Reporting(GenericBackend):
    """Says when each scan is done: after its start-up scans a backend waits for events."""

    def discover(self) -> dict[str, dict[str, Device]]:
        found = super().discover()
        say({"scanned": self.scans})
        return found


class Say(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        say({"log": record.getMessage()})


def main() -> None:
    args = json.loads(sys.argv[1])
    handler = Say(logging.INFO)
    for name in (
        "accel_plugins.backends.generic.monitor",
        "accel_plugins.backends.generic.backend",
    ):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    settings = GenericSettings(
        dev_root=Path(args["dev_root"]),
        udev_source=UdevSource(args["udev_source"]),
        event_paths=EventPaths(udev_control=Path(args["udev_control"])),
        rescan_interval=3600.0,  # only a uevent can explain a change
    )
    backend = Reporting(parse_config(args["config"], "netns.yaml"), settings)

    def publish(tree: DeviceTree) -> None:
        say({"tree": {r: sorted(d) for r, d in tree.items()}, "at": time.monotonic()})

    asyncio.run(backend.run(publish))


if __name__ == "__main__":
    main()
