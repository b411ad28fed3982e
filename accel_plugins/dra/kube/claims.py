"""KubeClaimSource: what a ResourceClaim was allocated, for our driver on this node.

A claim is read with one GET whenever the driver prepares it; a prepared claim is
answered from the checkpoint, so in practice once. Nothing is kept and nothing is
watched: a watch per claim would cost the API server one long-lived request per
prepared claim on every node (``metadata.name`` is the only field a claim can be
selected by, and the Node authorizer lets a node identity only ``get`` claims, so
no informer of "this node's claims" exists). A node's driver therefore holds a
fixed number of watches however many claims it prepares: its ResourceSlices and
its Node (the cordon annotation).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lightkube import ApiError, AsyncClient

from accel_plugins.dra.kube.api import ApiVersions, ResourceApi
from accel_plugins.dra.kube.claim_status import KubeClaimStatus
from accel_plugins.dra.model import (
    AllocatedDevice,
    ClaimError,
    ClaimRef,
    DeviceReport,
    OpaqueConfig,
    ResolvedClaim,
)
from accel_plugins.plugin.dra_taints import DeviceToleration

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Read:
    """A claim's allocation results and opaque configs, all drivers and pools, as
    read; the configs in the order they apply (class configs first, then the claim's:
    the claim's own settings win), each with its driver."""

    ref: ClaimRef
    results: tuple[AllocatedDevice, ...]
    configs: tuple[tuple[str, OpaqueConfig], ...] = ()
    consumers: tuple[str, ...] = ()

    def resolved(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim:
        return ResolvedClaim(
            ref=claim,
            devices=tuple(r for r in self.results if r.driver == driver and r.pool == pool),
            configs=tuple(c for d, c in self.configs if d == driver),
            consumers=self.consumers,
        )


class KubeClaimSource:
    """The :class:`~accel_plugins.dra.model.ClaimSource` on a real API server.

    A missing claim, a UID other than the kubelet's (the claim was deleted
    and recreated under the same name) or a claim without an allocation
    raise ClaimError. Anything else (the API server unreachable, 5xx,
    throttling) propagates unchanged: retrying is the caller's choice, as the
    kubelet retries NodePrepareResources itself. ``reads`` counts the GETs made.
    Read in ``api``'s resource.k8s.io version (or the one :class:`ApiVersions`
    finds served); the fields read are the same in v1, v1beta2 and v1beta1.
    The opaque configs for ``driver`` (``status.allocation.devices.config``,
    class configs before claim configs, as the scheduler copies them) come along.
    With ``status`` it is a ClaimStatusSink too: prepared devices go in the claims'
    ``status.devices`` (claim_status.py).
    """

    def __init__(
        self,
        client: AsyncClient,
        api: ResourceApi | ApiVersions | None = None,
        status: KubeClaimStatus | None = None,
    ) -> None:
        self._client = client
        self._apis = api if isinstance(api, ApiVersions) else ApiVersions(client, api)
        self.status = status
        self.reads = 0

    # ClaimStatusSink: the claims' status.devices, where a writer is given.
    def claim_prepared(self, claim: ClaimRef, devices: Sequence[DeviceReport]) -> None:
        if self.status is not None:
            self.status.claim_prepared(claim, devices)

    def claim_unprepared(self, claim: ClaimRef) -> None:
        if self.status is not None:
            self.status.claim_unprepared(claim)

    async def resolve(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim:
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        api = await self._apis.get()
        self.reads += 1
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
        configs = sorted(
            (
                (
                    c.opaque.driver,
                    OpaqueConfig(
                        parameters=dict(c.opaque.parameters or {}),
                        requests=tuple(c.requests or ()),
                        source=c.source,
                        index=i,
                    ),
                )
                for i, c in enumerate(
                    (allocation.devices.config if allocation.devices else None) or []
                )
                if c.opaque is not None
            ),
            key=lambda entry: entry[1].source != "FromClass",
        )
        read = _Read(
            claim,
            tuple(
                AllocatedDevice(
                    request=r.request,
                    driver=r.driver,
                    pool=r.pool,
                    device=r.device,
                    tolerations=_tolerations(r),
                    share_id=str(getattr(r, "shareID", None) or ""),
                    consumed=_consumed(r),
                    admin_access=bool(getattr(r, "adminAccess", None)),
                )
                for r in results
            ),
            tuple(configs),
            _pods(found.status.reservedFor),
        )
        return read.resolved(claim, driver, pool)


def _pods(reserved_for: Any) -> tuple[str, ...]:
    """The pods among a claim's consumers (status.reservedFor: core-group "pods")."""
    return tuple(str(c.name) for c in reserved_for or [] if c.resource == "pods" and not c.apiGroup)


def _consumed(result: Any) -> dict[str, str]:
    """A result's ``consumedCapacity`` (1.34+, DRAConsumableCapacity; absent elsewhere):
    capacity name -> the quantity as the scheduler wrote it."""
    return {str(k): str(v) for k, v in (getattr(result, "consumedCapacity", None) or {}).items()}


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
