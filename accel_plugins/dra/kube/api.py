"""Which ``resource.k8s.io`` version to speak: v1 (1.34+), v1beta2 (1.33), v1beta1 (1.32).

One binary serves every supported Kubernetes: the API server is asked once
which version it serves (newest first), and slices and claims are written and
read in it. Inside, the driver works in v1's shape; a :class:`ResourceApi`
converts at the wire. v1beta2 has v1's shape (v1 was made from it); v1beta1
wraps each device's fields in ``basic`` (``Device{name, basic: BasicDevice}``,
kubernetes/kubernetes staging/src/k8s.io/api/resource/v1beta1/types.go).
Claims are only read, and only ``status.allocation.devices.results``, whose
fields (request, driver, pool, device) are the same in all three.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import Status
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources import resource_v1, resource_v1beta1, resource_v1beta2

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"


@dataclass(frozen=True)
class ResourceApi:
    """One served version of resource.k8s.io and its lightkube resource types."""

    version: str
    slice_type: type[Any]
    claim_type: type[Any]

    @property
    def wrapped(self) -> bool:
        """Whether devices carry their fields in ``basic`` (v1beta1)."""
        return self.version == "v1beta1"

    def to_wire(self, item: resource_v1.ResourceSlice) -> Any:
        """A v1 slice as this version's object."""
        if self is V1:
            return item
        data = item.to_dict()
        data["apiVersion"] = f"{GROUP}/{self.version}"
        if self.wrapped:
            spec = data.get("spec") or {}
            spec["devices"] = [_wrap(d) for d in spec.get("devices") or []]
        return self.slice_type.from_dict(data)

    def from_wire(self, item: Any) -> resource_v1.ResourceSlice:
        """This version's slice in v1's shape."""
        if self is V1:
            return cast(resource_v1.ResourceSlice, item)
        data = item.to_dict()
        data["apiVersion"] = f"{GROUP}/v1"
        if self.wrapped:
            spec = data.get("spec") or {}
            spec["devices"] = [_unwrap(d) for d in spec.get("devices") or []]
        return cast(resource_v1.ResourceSlice, resource_v1.ResourceSlice.from_dict(data))


def _wrap(device: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in device.items() if k != "name"}
    return {"name": device["name"], "basic": rest}


def _unwrap(device: dict[str, Any]) -> dict[str, Any]:
    return {"name": device["name"], **(device.get("basic") or {})}


V1 = ResourceApi("v1", resource_v1.ResourceSlice, resource_v1.ResourceClaim)
V1BETA2 = ResourceApi("v1beta2", resource_v1beta2.ResourceSlice, resource_v1beta2.ResourceClaim)
V1BETA1 = ResourceApi("v1beta1", resource_v1beta1.ResourceSlice, resource_v1beta1.ResourceClaim)
NEWEST_FIRST = (V1, V1BETA2, V1BETA1)


class ApiVersions:
    """Asks the API server once which version it serves; every caller then gets that one.

    The question is a list of ResourceSlices limited to one item, the request the
    driver needs permission for anyway: 404 means that version is not served.
    With a kubelet's identity give ``node``: the Node authorizer lets a node list
    only with the field selector ``spec.nodeName=<node>``. ``fixed`` skips the
    question (a known server).
    """

    def __init__(
        self, client: AsyncClient, fixed: ResourceApi | None = None, *, node: str | None = None
    ) -> None:
        self._client = client
        self._found = fixed
        self._node = node

    async def get(self) -> ResourceApi:
        if self._found is None:
            self._found = await self._discover()
        return self._found

    async def _discover(self) -> ResourceApi:
        skipped: list[str] = []
        for api in NEWEST_FIRST:
            try:
                fields: dict[str, str | BinaryOperator | SequenceOperator] | None = (
                    {"spec.nodeName": self._node} if self._node else None
                )
                async for _ in self._client.list(api.slice_type, chunk_size=1, fields=fields):
                    break
            except ApiError as exc:
                if exc.status.code == 404:
                    skipped.append(api.version)
                    continue
                raise
            why = f" (not served: {', '.join(skipped)})" if skipped else ""
            log.info("using %s/%s for ResourceSlices and ResourceClaims%s", GROUP, api.version, why)
            return api
        # An ApiError, so the publisher retries it like any refusal (and says why).
        raise ApiError(
            status=Status(
                code=404,
                message=f"the API server serves none of {GROUP}/v1, v1beta2, v1beta1 "
                "(is its DynamicResourceAllocation feature gate on?)",
            )
        )
