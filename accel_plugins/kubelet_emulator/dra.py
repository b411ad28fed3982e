"""The kubelet's DRA side: drivers its plugin watcher registers, and calls into them.

What ``pkg/kubelet/cm/dra/plugin`` does, reduced: a plugin of type
``DRAPlugin`` is validated by its supported versions (the gRPC service names
``v1.DRAPlugin`` and ``v1beta1.DRAPlugin``; v1 is used when offered) and its
name (a DNS subdomain, the driver name ResourceSlices carry), and the newest
registration of a driver name is the one called. :class:`DraClient` is the
kubelet's client of one driver: NodePrepareResources, NodeUnprepareResources
and the NodeWatchResources health stream, as plain values. Admitting pods
with resource claims (reading them from an API server) builds on this.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from accel_plugins.api import dra_health_v1alpha1_pb2 as health_pb
from accel_plugins.api import dra_health_v1alpha1_pb2_grpc as health_grpc
from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.api import dra_v1_pb2_grpc as v1_grpc
from accel_plugins.api import dra_v1beta1_pb2 as v1beta1
from accel_plugins.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from accel_plugins.kubelet_emulator.client import unix_target
from accel_plugins.kubelet_emulator.errors import PluginCallError
from accel_plugins.kubelet_emulator.registration import RegistrationRefusedError
from accel_plugins.util.k8snames import DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_RE

log = logging.getLogger(__name__)

DRA_PLUGIN = "DRAPlugin"
SERVICE_V1 = "v1.DRAPlugin"
SERVICE_V1BETA1 = "v1beta1.DRAPlugin"
# In the kubelet's order of preference.
DRA_SERVICES = (SERVICE_V1, SERVICE_V1BETA1)
CALL_TIMEOUT = 45.0  # the kubelet gives NodePrepareResources this long
HEALTH_NAMES = {
    health_pb.UNKNOWN: "Unknown",
    health_pb.HEALTHY: "Healthy",
    health_pb.UNHEALTHY: "Unhealthy",
}


@dataclass(frozen=True)
class DraClaim:
    """A ResourceClaim as the kubelet names it to a driver."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class DraDevice:
    """One prepared device: its requests, pool, name and the CDI devices a container gets."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str = ""  # v1's optional share_id: which share of a shared device


@dataclass(frozen=True)
class DraClaimResult:
    """A driver's answer for one claim: its devices, or why it failed (``error``)."""

    devices: tuple[DraDevice, ...] = ()
    error: str = ""

    @property
    def cdi_ids(self) -> tuple[str, ...]:
        """Every CDI device of the claim, in device order, each once."""
        return tuple(dict.fromkeys(c for d in self.devices for c in d.cdi_ids))


@dataclass(frozen=True)
class DraDeviceHealth:
    pool: str
    device: str
    health: str  # "Healthy", "Unhealthy" or "Unknown"
    updated: int  # Unix seconds, as the driver stamped it
    timeout_seconds: int = 0  # health_check_timeout_seconds; 0: the kubelet's default


def choose_service(versions: Iterable[str]) -> str:
    """The service the kubelet would call, or RegistrationRefusedError(INVALID_ARGUMENT)."""
    offered = list(versions)
    for service in DRA_SERVICES:
        if service in offered:
            return service
    raise RegistrationRefusedError(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"none of the supported services {offered} is one the kubelet speaks "
        f"({', '.join(DRA_SERVICES)})",
    )


def driver_name_problem(name: str) -> str | None:
    if not name or len(name) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN_RE.fullmatch(name):
        return f"driver name {name!r} is not a DNS subdomain"
    return None


def _claims(module: Any, claims: Sequence[DraClaim]) -> list[Any]:
    return [module.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


class DraClient:
    """The kubelet's client of one DRA driver's endpoint (``service`` from GetInfo)."""

    def __init__(self, driver: str, endpoint: Path, service: str = SERVICE_V1) -> None:
        if service not in DRA_SERVICES:
            raise ValueError(f"unknown DRA service {service!r}")
        self.driver = driver
        self.endpoint = Path(endpoint)
        self.service = service
        self._channel = grpc.aio.insecure_channel(unix_target(self.endpoint))
        api: Any = v1 if service == SERVICE_V1 else v1beta1
        stubs: Any = v1_grpc if service == SERVICE_V1 else v1beta1_grpc
        self._api = api
        self._stub: Any = stubs.DRAPluginStub(self._channel)

    async def prepare(
        self, claims: Sequence[DraClaim], *, timeout: float = CALL_TIMEOUT
    ) -> dict[str, DraClaimResult]:
        """Claim UID -> result. PluginCallError when the call itself fails."""
        request = self._api.NodePrepareResourcesRequest(claims=_claims(self._api, claims))
        response = await self._call("NodePrepareResources", request, timeout)
        return {
            uid: DraClaimResult(
                devices=tuple(
                    DraDevice(
                        requests=tuple(d.request_names),
                        pool=d.pool_name,
                        device=d.device_name,
                        cdi_ids=tuple(d.cdi_device_ids),
                        share_id=getattr(d, "share_id", ""),  # v1beta1 has none
                    )
                    for d in answer.devices
                ),
                error=answer.error,
            )
            for uid, answer in response.claims.items()
        }

    async def unprepare(
        self, claims: Sequence[DraClaim], *, timeout: float = CALL_TIMEOUT
    ) -> dict[str, str]:
        """Claim UID -> error ("" when released)."""
        request = self._api.NodeUnprepareResourcesRequest(claims=_claims(self._api, claims))
        response = await self._call("NodeUnprepareResources", request, timeout)
        return {uid: answer.error for uid, answer in response.claims.items()}

    async def watch_health(self) -> AsyncGenerator[list[DraDeviceHealth], None]:
        """Each full list the driver streams (PluginCallError when it has no health service)."""
        stub: Any = health_grpc.DRAResourceHealthStub(self._channel)
        stream = stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest())
        try:
            async for response in stream:
                yield [
                    DraDeviceHealth(
                        pool=d.device.pool_name,
                        device=d.device.device_name,
                        health=HEALTH_NAMES.get(d.health, "Unknown"),
                        updated=d.last_updated_time,
                        timeout_seconds=d.health_check_timeout_seconds,
                    )
                    for d in response.devices
                ]
        except grpc.aio.AioRpcError as exc:
            raise PluginCallError(
                "NodeWatchResources", self.endpoint, exc.code(), exc.details() or ""
            ) from exc
        finally:
            stream.cancel()

    async def close(self) -> None:
        await self._channel.close(None)

    async def _call(self, method: str, request: Any, timeout: float) -> Any:
        try:
            return await getattr(self._stub, method)(request, timeout=timeout, wait_for_ready=True)
        except grpc.aio.AioRpcError as exc:
            raise PluginCallError(method, self.endpoint, exc.code(), exc.details() or "") from exc


class DraDrivers:
    """The DRA drivers registered now: the plugin watcher's handler for ``DRAPlugin``.

    As the kubelet since 1.33, a driver may be registered through several sockets at
    once (the old and new pod of a rolling update): calls go to the newest registration,
    and when it goes the one before it serves again; the driver is gone only with its
    last registration.
    """

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._clients: dict[str, list[DraClient]] = {}
        self._on_change = on_change or (lambda: None)

    @property
    def names(self) -> list[str]:
        return sorted(self._clients)

    def client(self, driver: str) -> DraClient:
        """The driver's newest registration; KeyError when no such driver is registered."""
        return self._clients[driver][-1]

    def registrations(self, driver: str) -> list[DraClient]:
        """Every live registration of ``driver``, oldest first."""
        return list(self._clients.get(driver, ()))

    async def register(
        self, name: str, endpoint: str, versions: list[str], socket: Path
    ) -> DraClient:
        service = choose_service(versions)
        problem = driver_name_problem(name)
        if problem is not None:
            raise RegistrationRefusedError(grpc.StatusCode.INVALID_ARGUMENT, problem)
        client = DraClient(name, Path(endpoint), service)
        clients = self._clients.setdefault(name, [])
        # The same endpoint again (a restarted plugin) replaces its old registration.
        replaced = [c for c in clients if c.endpoint == client.endpoint]
        clients[:] = [c for c in clients if c.endpoint != client.endpoint] + [client]
        for old in replaced:
            await old.close()
        log.info("DRA driver %s registered (%s at %s)", name, service, endpoint)
        self._on_change()
        return client

    async def deregister(self, client: DraClient, socket: Path) -> None:
        clients = self._clients.get(client.driver, [])
        if client in clients:
            clients.remove(client)
            if not clients:
                del self._clients[client.driver]
            self._on_change()
        await client.close()

    async def close(self) -> None:
        clients = [c for cs in self._clients.values() for c in cs]
        self._clients = {}
        for client in clients:
            await client.close()
