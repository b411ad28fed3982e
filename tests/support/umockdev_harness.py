"""Runs the generic backend inside a umockdev testbed; driven over stdin/stdout.

Start it as ``umockdev-wrapper python -m tests.support.umockdev_harness``: umockdev's
LD_PRELOAD library then shows this process a fake /sys and /dev and turns
the testbed's uevents into netlink messages libudev (pyudev) receives. The
testbed and the code under test must share the process, so the test talks
to it through JSON lines:

stdin commands                                      stdout lines
{"op": "start", "config": YAML, "udev_source": ..., {"ready": true}
 "plugin_dir": DIR or null}
{"op": "add", "record": UMOCKDEV_RECORD,            {"ok": "add"}
 "uevent": SYSPATH or null}
{"op": "uevent", "syspath": P, "action": A}         {"ok": "uevent"}
{"op": "remove", "syspath": P}                      {"ok": "remove"}
{"op": "set", "syspath": P, "attribute": A,         {"ok": "set"}
 "value": V}   (then a "change" uevent)
                                                    {"tree": {resource: {id: {...}}}}

Every tree the backend publishes is printed; with a ``plugin_dir`` the real
Manager also serves it to the kubelet (the emulator runs in the test).

umockdev's preload library keeps one table of open files for the whole process,
and it is not safe across threads: a scan of the fake /sys on the backend's
worker thread (``discover`` runs in ``asyncio.to_thread``) while the testbed
adds, removes or sends a uevent on the main thread could lose the uevent
("failed to map fd to a path", then "uevent_sender_send: No such device"), about
one storm in ten. The kernel's sysfs has no such limit, so the harness alone
takes one lock around each scan and each testbed change.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.config import GenericConfig, parse_config
from accel_plugins.backends.generic.monitor import UdevSource
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.plugin.backend import Backend, Publish
from accel_plugins.plugin.device import Device, DeviceTree

# python3-gi is Debian's, built for the system Python 3.11; its C extension
# loads in any CPython 3.11, so borrow it rather than build PyGObject.
GI_PATH = "/usr/lib/python3/dist-packages"


TESTBED = threading.Lock()


class LockedBackend(GenericBackend):
    """The generic backend whose scans never overlap a testbed change (see above)."""

    def discover(self) -> dict[str, dict[str, Device]]:
        with TESTBED:
            return super().discover()


def _testbed() -> Any:
    if GI_PATH not in sys.path:
        sys.path.append(GI_PATH)
    import gi  # type: ignore[import-not-found, unused-ignore]

    gi.require_version("UMockdev", "1.0")
    from gi.repository import UMockdev  # type: ignore[import-not-found, unused-ignore]

    return UMockdev.Testbed.new()


def tree_json(tree: DeviceTree) -> dict[str, Any]:
    return {
        resource: {
            device_id: {
                "health": device.health.value,
                "nodes": [[n.host_path, n.container_path, n.permissions] for n in device.nodes],
                "numa": list(device.numa_nodes),
            }
            for device_id, device in devices.items()
        }
        for resource, devices in tree.items()
    }


def say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Printing:
    """The backend, with every published tree also printed for the test."""

    def __init__(self, backend: GenericBackend) -> None:
        self.backend = backend

    async def run(self, publish: Publish) -> None:
        def tee(tree: DeviceTree) -> None:
            say({"tree": tree_json(tree)})
            publish(tree)

        await self.backend.run(tee)


async def main() -> None:
    testbed = _testbed()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: list[asyncio.Task[None]] = []
    manager: Manager | None = None
    while line := await reader.readline():
        command = json.loads(line)
        op = command["op"]
        if op == "start":
            config = parse_config(textwrap.dedent(command["config"]), "umockdev.yaml")
            settings = GenericSettings(
                udev_source=UdevSource(command["udev_source"]),
                rescan_interval=command.get("rescan_interval", 5.0),
            )

            def build(
                config: GenericConfig = config, settings: GenericSettings = settings
            ) -> Backend:
                return Printing(LockedBackend(config, settings))

            if command.get("plugin_dir"):
                manager = Manager(build, ManagerSettings(Path(command["plugin_dir"])))
                tasks.append(asyncio.create_task(manager.run()))
            else:
                tasks.append(asyncio.create_task(build().run(lambda tree: None)))
            say({"ready": True})
        elif op == "add":
            with TESTBED:
                if not testbed.add_from_string(command["record"]):
                    raise RuntimeError(f"umockdev refused the record:\n{command['record']}")
                if command.get("uevent"):
                    testbed.uevent(command["uevent"], "add")
            say({"ok": op})
        elif op == "uevent":
            with TESTBED:
                testbed.uevent(command["syspath"], command["action"])
            say({"ok": op})
        elif op == "set":
            with TESTBED:
                testbed.set_attribute(command["syspath"], command["attribute"], command["value"])
                testbed.uevent(command["syspath"], "change")
            say({"ok": op})
        elif op == "remove":
            with TESTBED:
                testbed.uevent(command["syspath"], "remove")
                testbed.remove_device(command["syspath"])
            say({"ok": op})
        else:
            raise ValueError(f"unknown command {op!r}")
    if manager is not None:
        await manager.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    if "UMOCKDEV_DIR" not in os.environ and "LD_PRELOAD" not in os.environ:
        sys.exit("run me under umockdev-wrapper")
    asyncio.run(main())
