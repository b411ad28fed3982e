"""KubeClaimSource: what a ResourceClaim was allocated, for our driver on this node."""

from __future__ import annotations

from lightkube import ApiError, AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim

from accel_plugins.dra.model import AllocatedDevice, ClaimError, ClaimRef, ResolvedClaim


class KubeClaimSource:
    """The :class:`~accel_plugins.dra.model.ClaimSource` on a real API server.

    One GET per claim. A missing claim, a UID other than the kubelet's (the
    claim was deleted and recreated under the same name) or a claim without
    an allocation raise ClaimError. Anything else (the API server
    unreachable, 5xx, throttling) propagates unchanged: retrying is the
    caller's choice, as the kubelet retries NodePrepareResources itself.
    """

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def resolve(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim:
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        try:
            found = await self._client.get(ResourceClaim, claim.name, namespace=claim.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                raise ClaimError(f"{where} not found") from exc
            raise
        uid = found.metadata.uid if found.metadata else None
        if uid != claim.uid:
            raise ClaimError(f"{where} has UID {uid}, not {claim.uid} (deleted and recreated?)")
        allocation = found.status.allocation if found.status else None
        if allocation is None:
            raise ClaimError(f"{where} is not allocated")
        results = (allocation.devices.results if allocation.devices else None) or []
        devices = tuple(
            AllocatedDevice(request=r.request, driver=r.driver, pool=r.pool, device=r.device)
            for r in results
            if r.driver == driver and r.pool == pool
        )
        return ResolvedClaim(ref=claim, devices=devices)
