"""Reading the other mode's state on this node, read-only.

Device-plugin mode (read by a DRA driver starting): the kubelet's PodResources List
for devices of our resources, and our resource sockets in the plugin directory that
still accept connections (a socket file left by a killed plugin does not count).
DRA mode (read by a device plugin starting): the driver's checkpoint of prepared
claims under ``<kubelet-plugins-dir>/<driver>/`` and its live sockets (``dra.sock``, or
``dra-<pod UID>.sock`` for each pod of a rolling update).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import grpc

from accel_plugins.api import podresources_v1_pb2 as pr
from accel_plugins.api import podresources_v1_pb2_grpc as pr_grpc
from accel_plugins.switch.model import Blockers, HeldDevice
from accel_plugins.util.unix_socket import accepts_connections

log = logging.getLogger(__name__)

CALL_TIMEOUT = 10.0
# accel_plugins.dra.instances.dra_socket_name's names (not imported: no DRA deps here)
DRA_SOCKETS = ("dra.sock", "dra-*.sock")
CHECKPOINT = "checkpoint.json"  # accel_plugins.dra.driver.CHECKPOINT_NAME


def ours(resource: str, domains: Sequence[str]) -> bool:
    return any(resource.startswith(f"{domain}/") for domain in domains)


class DevicePluginSide:
    """The device-plugin mode of our resources (those in ``domains``) on this node."""

    def __init__(self, plugin_dir: Path, pod_resources: Path, domains: Sequence[str]) -> None:
        self.plugin_dir = plugin_dir
        self.pod_resources = pod_resources
        self.domains = tuple(domains)

    async def read(self) -> Blockers:
        sockets = tuple(
            sorted(
                path.name
                for domain in self.domains
                for path in self.plugin_dir.glob(f"{domain}_*.sock")
                if accepts_connections(path)
            )
        )
        return Blockers(held=await self._held(), advertised=sockets)

    async def _held(self) -> tuple[HeldDevice, ...]:
        if not self.pod_resources.exists():
            return ()  # no kubelet socket: nothing the kubelet can say is held
        async with grpc.aio.insecure_channel(f"unix://{self.pod_resources}") as channel:
            stub = pr_grpc.PodResourcesListerStub(channel)
            listed = await stub.List(pr.ListPodResourcesRequest(), timeout=CALL_TIMEOUT)
        return tuple(
            HeldDevice(f"{pod.namespace}/{pod.name}", devices.resource_name, device)
            for pod in listed.pod_resources
            for container in pod.containers
            for devices in container.devices
            if ours(devices.resource_name, self.domains)
            for device in devices.device_ids
        )


class DraSide:
    """The DRA mode of ``driver`` on this node, from its directory under the kubelet's."""

    def __init__(self, kubelet_plugins_dir: Path, driver: str) -> None:
        self.dir = kubelet_plugins_dir / driver
        self.driver = driver

    async def read(self) -> Blockers:
        sockets = sorted({p for pattern in DRA_SOCKETS for p in self.dir.glob(pattern)})
        advertised = tuple(f"{self.driver} {path}" for path in sockets if accepts_connections(path))
        return Blockers(held=self._held(), advertised=advertised)

    def _held(self) -> tuple[HeldDevice, ...]:
        path = self.dir / CHECKPOINT
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return ()
        except (OSError, ValueError) as exc:
            # The driver sets an unreadable checkpoint aside when it starts; until then
            # what it held is unknown, so it counts as held.
            return (HeldDevice(str(path), self.driver, f"unreadable: {exc}"),)
        held = []
        with contextlib.suppress(AttributeError, TypeError):
            for uid, claim in dict(data.get("claims", {})).items():
                holder = f"{claim.get('namespace', '')}/{claim.get('name', uid)}"
                devices = claim.get("devices") or [{"device": "?"}]
                # A monitor's admin access holds nothing: the device stays free to move.
                held += [
                    HeldDevice(holder, self.driver, str(d.get("device")))
                    for d in devices
                    if d.get("adminAccess") is not True
                ]
        return tuple(held)
