"""KubeClaimSource: what a ResourceClaim was allocated, for our driver on this node."""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, AsyncClient

from accel_plugins.dra.kube.api import ApiVersions, ResourceApi
from accel_plugins.dra.model import (
    AllocatedDevice,
    ClaimError,
    ClaimRef,
    OpaqueConfig,
    ResolvedClaim,
)


class KubeClaimSource:
    """The :class:`~accel_plugins.dra.model.ClaimSource` on a real API server.

    One GET per claim. A missing claim, a UID other than the kubelet's (the
    claim was deleted and recreated under the same name) or a claim without
    an allocation raise ClaimError. Anything else (the API server
    unreachable, 5xx, throttling) propagates unchanged: retrying is the
    caller's choice, as the kubelet retries NodePrepareResources itself.
    Read in ``api``'s resource.k8s.io version (or the one :class:`ApiVersions`
    finds served); the fields read are the same in v1, v1beta2 and v1beta1.
    The opaque configs for ``driver`` (``status.allocation.devices.config``,
    class configs before claim configs, as the scheduler copies them) come along.
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
            AllocatedDevice(request=r.request, driver=r.driver, pool=r.pool, device=r.device)
            for r in results
            if r.driver == driver and r.pool == pool
        )
        # Class configs first, then the claim's: the claim's own settings win.
        configs = sorted(
            (
                OpaqueConfig(
                    parameters=dict(c.opaque.parameters or {}),
                    requests=tuple(c.requests or ()),
                    source=c.source,
                    index=i,
                )
                for i, c in enumerate(
                    (allocation.devices.config if allocation.devices else None) or []
                )
                if c.opaque is not None and c.opaque.driver == driver
            ),
            key=lambda c: c.source != "FromClass",
        )
        return ResolvedClaim(ref=claim, devices=devices, configs=tuple(configs))
