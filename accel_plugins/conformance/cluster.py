"""The kit's API side: the driver's ResourceSlices, and claims it creates and allocates itself.

The kit plays the scheduler: it writes ``status.allocation`` of its claims (the
status subresource, as kube-scheduler does) with devices taken from the
driver's own slices. Everything is read and written as plain dicts in
resource.k8s.io/v1's shape; the served version is asked once (v1 from 1.34,
v1beta2 in 1.33, v1beta1 in 1.32), and v1beta1's ``basic`` wrapping of a
device's fields and flat requests are converted at the wire. Its own code, not
the driver's: the kit must not agree with a driver by sharing its converter.
"""

from __future__ import annotations

import contextlib
import importlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Namespace, Node
from lightkube.types import PatchType

from accel_plugins.errors import AccelPluginsError

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1beta1")  # newest first
ADMIN_ACCESS_LABELS = ("resource.kubernetes.io/admin-access", "resource.k8s.io/admin-access")
FIELD_MANAGER = "dra-conformance"


class ClusterError(AccelPluginsError):
    """The API server refused what the kit needs to do (not a finding about the driver)."""


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Allocated:
    """One entry of ``status.allocation.devices.results`` (v1's field names)."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.admin_access:
            out["adminAccess"] = True
        if self.share_id:
            out["shareID"] = self.share_id
        return out


def _module(version: str) -> ModuleType:
    return importlib.import_module(f"lightkube.resources.resource_{version}")


def _unwrap(device: Mapping[str, Any]) -> dict[str, Any]:
    basic = device.get("basic")
    if basic is None:
        return dict(device)
    return {"name": device.get("name"), **basic}


def _flatten(request: Mapping[str, Any]) -> dict[str, Any]:
    """A v1 request in v1beta1's shape: ``exactly``'s fields on the request itself."""
    out = {k: v for k, v in request.items() if k != "exactly"}
    out.update(request.get("exactly") or {})
    return out


@dataclass
class Cluster:
    """The API server as the kit uses it for one driver on one node."""

    client: AsyncClient
    driver: str
    node: str
    version: str = ""
    namespaces: list[str] = field(default_factory=list)
    device_class: str = ""

    async def discover(self) -> str:
        """The resource.k8s.io version served (newest first); ClusterError when none is."""
        for version in VERSIONS:
            try:
                async for _ in self.client.list(_module(version).ResourceSlice, chunk_size=1):
                    break
            except ApiError as exc:
                if exc.status.code == 404:
                    continue
                raise ClusterError(f"listing ResourceSlices: {exc.status.message}") from exc
            self.version = version
            return version
        raise ClusterError(f"the API server serves no {GROUP} version of {', '.join(VERSIONS)}")

    @property
    def resources(self) -> ModuleType:
        return _module(self.version)

    async def slices(self) -> list[dict[str, Any]]:
        """Every ResourceSlice of the driver (all nodes), in v1's shape, sorted by name."""
        found = []
        async for item in self.client.list(
            self.resources.ResourceSlice, fields={"spec.driver": self.driver}
        ):
            data = item.to_dict()
            spec = data.get("spec") or {}
            spec["devices"] = [_unwrap(d) for d in spec.get("devices") or []]
            data["spec"] = spec
            found.append(data)
        return sorted(found, key=lambda s: s["metadata"]["name"])

    async def node_slices(self) -> list[dict[str, Any]]:
        return [s for s in await self.slices() if s["spec"].get("nodeName") == self.node]

    async def wipe_node_slices(self) -> int:
        """Delete this node's slices of the driver, as the kubelet does at its start."""
        mine = await self.node_slices()
        for item in mine:
            try:
                await self.client.delete(self.resources.ResourceSlice, item["metadata"]["name"])
            except ApiError as exc:
                if exc.status.code != 404:
                    raise ClusterError(f"deleting slices: {exc.status.message}") from exc
        return len(mine)

    async def ensure_node(self) -> None:
        """A Node object for the node (an API server of the kit's own has none)."""
        try:
            await self.client.get(Node, self.node)
        except ApiError as exc:
            if exc.status.code != 404:
                raise ClusterError(f"reading Node {self.node}: {exc.status.message}") from exc
            await self._create(Node.from_dict({"metadata": {"name": self.node}}))

    async def prepare_objects(self) -> None:
        """The DeviceClass for the driver's devices and a namespace for the claims."""
        name = f"dra-conformance-{secrets.token_hex(3)}"
        expression = f'device.driver == "{self.driver}"'
        await self._create(
            self.resources.DeviceClass.from_dict(
                {
                    "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": expression}}]},
                }
            )
        )
        self.device_class = name
        await self.namespace()

    async def namespace(self, *, admin_access: bool = False) -> str:
        """A namespace of the kit's; ``admin_access`` labels it for admin-access claims."""
        name = f"dra-conformance-{secrets.token_hex(4)}"
        # 1.33 named the label resource.k8s.io/admin-access; 1.34 renamed it.
        labels = {k: "true" for k in ADMIN_ACCESS_LABELS} if admin_access else {}
        await self._create(Namespace.from_dict({"metadata": {"name": name, "labels": labels}}))
        self.namespaces.append(name)
        return name

    async def create_claim(
        self, requests: Sequence[Mapping[str, Any]], namespace: str = ""
    ) -> Claim:
        """A ResourceClaim with these requests (v1's shape: ``exactly`` or ``firstAvailable``)."""
        wire = [dict(r) if self.version != "v1beta1" else _flatten(r) for r in requests]
        ns = namespace or self.namespaces[0]
        created = await self._create(
            self.resources.ResourceClaim.from_dict(
                {
                    "metadata": {"generateName": "claim-", "namespace": ns},
                    "spec": {"devices": {"requests": wire}},
                }
            )
        )
        return Claim(ns, created.metadata.name, created.metadata.uid)

    def exactly(self, name: str, *, admin_access: bool = False) -> dict[str, Any]:
        """A request for one device of the kit's class."""
        spec: dict[str, Any] = {"deviceClassName": self.device_class, "count": 1}
        spec["allocationMode"] = "ExactCount"
        if admin_access:
            spec["adminAccess"] = True
        return {"name": name, "exactly": spec}

    async def allocate(self, claim: Claim, results: Sequence[Allocated]) -> dict[str, Any]:
        """Write the allocation as the scheduler does; the claim as stored afterwards (the
        API server drops fields whose feature gate is off)."""
        body = {
            "status": {
                "allocation": {
                    "devices": {"results": [r.as_dict() for r in results]},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [self.node],
                                    }
                                ]
                            }
                        ]
                    },
                },
                "reservedFor": [
                    {"resource": "pods", "name": f"pod-{claim.name}", "uid": secrets.token_hex(8)}
                ],
            }
        }
        try:
            stored = await self.client.patch(
                self.resources.ResourceClaimStatus,
                claim.name,
                body,
                namespace=claim.namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as exc:
            raise ClusterError(f"allocating claim {claim.name}: {exc.status.message}") from exc
        data: dict[str, Any] = stored.to_dict()
        return data

    async def delete_claim(self, claim: Claim) -> None:
        try:
            await self.client.delete(
                self.resources.ResourceClaim, claim.name, namespace=claim.namespace
            )
        except ApiError as exc:
            if exc.status.code != 404:
                raise ClusterError(f"deleting claim {claim.name}: {exc.status.message}") from exc

    async def cleanup(self) -> None:
        """Remove what the kit created (its claims go with their namespaces)."""
        # Best effort: the report matters more than the leftovers.
        for ns in self.namespaces:
            with contextlib.suppress(ApiError):
                await self.client.delete(Namespace, ns)
        if self.device_class:
            with contextlib.suppress(ApiError):
                await self.client.delete(self.resources.DeviceClass, self.device_class)

    async def _create(self, obj: Any) -> Any:
        try:
            return await self.client.create(obj, field_manager=FIELD_MANAGER)
        except ApiError as exc:
            kind = type(obj).__name__
            raise ClusterError(f"creating a {kind}: {exc.status.message}") from exc
