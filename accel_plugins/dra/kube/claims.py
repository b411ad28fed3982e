"""KubeClaimSource: what a ResourceClaim was allocated, for our driver on this node."""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, AsyncClient

from accel_plugins.dra.kube.api import ApiVersions, ResourceApi
from accel_plugins.dra.model import AllocatedDevice, ClaimError, ClaimRef, ResolvedClaim
from accel_plugins.plugin.dra_taints import DeviceToleration


class KubeClaimSource:
    """The :class:`~accel_plugins.dra.model.ClaimSource` on a real API server.

    One GET per claim. A missing claim, a UID other than the kubelet's (the
    claim was deleted and recreated under the same name) or a claim without
    an allocation raise ClaimError. Anything else (the API server
    unreachable, 5xx, throttling) propagates unchanged: retrying is the
    caller's choice, as the kubelet retries NodePrepareResources itself.
    Read in ``api``'s resource.k8s.io version (or the one :class:`ApiVersions`
    finds served); the fields read are the same in v1, v1beta2 and v1beta1.
    """

    def __init__(self, client: AsyncClient, api: ResourceApi | ApiVersions | None = None) -> None:
        self._client = client
        self._apis = api if isinstance(api, ApiVersions) else ApiVersions(client, api)

    async def resolve(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim:
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        api = await self._apis.get()
        try:
            found: Any = await self._client.get(
                api.claim_type, claim.name, namespace=claim.namespace
            )
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
            AllocatedDevice(
                request=r.request,
                driver=r.driver,
                pool=r.pool,
                device=r.device,
                tolerations=_tolerations(r),
            )
            for r in results
            if r.driver == driver and r.pool == pool
        )
        return ResolvedClaim(ref=claim, devices=devices)


def _tolerations(result: Any) -> tuple[DeviceToleration, ...]:
    """A result's ``tolerations`` (1.33+, DRADeviceTaints; absent before and in v1beta1's
    older servers, where nothing is tainted either)."""
    return tuple(
        DeviceToleration(
            key=t.key or "",
            operator=t.operator or "Equal",
            value=t.value or "",
            effect=t.effect or "",
        )
        for t in getattr(result, "tolerations", None) or []
    )
