"""KubeClaimSource: what a ResourceClaim was allocated, for our driver on this node.

A claim is read once. The kubelet names a claim by namespace, name and UID
(no resourceVersion), so a read is kept by UID together with a watch of that
one claim from the version read (``metadata.name`` is the only field a claim
can be selected by: the API server's resourceclaim strategy offers no
selector on the allocation's node, and the Node authorizer lets a node
identity only ``get`` claims, so no informer of "this node's claims" exists).
Any change to the claim (deallocated, reallocated, deleted) or the end of the
watch forgets the read, and the next prepare reads again. The scheduler
writes a claim's allocation before it binds the pod, and the API server's
watch cache sends events in version order, so the change reaches us before
the binding reaches the kubelet that will ask.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
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
from accel_plugins.plugin.dra_taints import DeviceToleration

log = logging.getLogger(__name__)

DEFAULT_KEPT = 16
"""Claims kept with a watch each: one HTTP/1.1 connection per watch, shared with the
client's other calls, so well below httpx's pool of 100."""


@dataclass(frozen=True)
class _Read:
    """A claim's allocation results and opaque configs, all drivers and pools, as last
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
    kubelet retries NodePrepareResources itself. ``kept`` is how many reads
    are kept (0: read every time); ``reads`` counts the GETs made.
    Read in ``api``'s resource.k8s.io version (or the one :class:`ApiVersions`
    finds served); the fields read are the same in v1, v1beta2 and v1beta1.
    The opaque configs for ``driver`` (``status.allocation.devices.config``,
    class configs before claim configs, as the scheduler copies them) come along.
    """

    def __init__(
        self,
        client: AsyncClient,
        api: ResourceApi | ApiVersions | None = None,
        *,
        kept: int = DEFAULT_KEPT,
    ) -> None:
        self._client = client
        self._apis = api if isinstance(api, ApiVersions) else ApiVersions(client, api)
        self._kept = kept
        self._reads: OrderedDict[str, _Read] = OrderedDict()
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._forgotten: dict[str, asyncio.Event] = {}
        self.reads = 0

    async def resolve(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim:
        kept = self._reads.get(claim.uid)
        if kept is not None and kept.ref == claim:
            self._reads.move_to_end(claim.uid)
            return kept.resolved(claim, driver, pool)
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
                )
                for r in results
            ),
            tuple(configs),
            _pods(found.status.reservedFor),
        )
        version = found.metadata.resourceVersion if found.metadata else None
        if self._kept > 0 and version:
            self._keep(read, version, api)
        return read.resolved(claim, driver, pool)

    def kept(self, uid: str) -> bool:
        """Whether a read of the claim is kept now (the next resolve needs no GET)."""
        return uid in self._reads

    async def forgotten(self, uid: str) -> None:
        """Return once no read of the claim is kept (for tests: a change has arrived)."""
        if uid in self._reads:
            await self._forgotten.setdefault(uid, asyncio.Event()).wait()

    async def close(self) -> None:
        """Stop every watch."""
        tasks = list(self._watches.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _keep(self, read: _Read, version: str, api: ResourceApi) -> None:
        uid = read.ref.uid
        self._forget(uid)
        self._reads[uid] = read
        self._watches[uid] = asyncio.create_task(
            self._follow(read.ref, version, api), name=f"claim watch {uid}"
        )
        while len(self._reads) > self._kept:
            self._forget(next(iter(self._reads)))

    def _forget(self, uid: str) -> None:
        self._reads.pop(uid, None)
        task = self._watches.pop(uid, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        event = self._forgotten.pop(uid, None)
        if event is not None:
            event.set()

    async def _follow(self, claim: ClaimRef, version: str, api: ResourceApi) -> None:
        """Forget the read at the claim's first change after ``version``, or when the
        watch ends (it cannot vouch for the read any more)."""
        try:
            async for _kind, _obj in self._client.watch(
                api.claim_type,
                namespace=claim.namespace,
                fields={"metadata.name": claim.name},
                resource_version=version,
            ):
                break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Forbidden (an identity without watch), 410 Gone, a dropped connection:
            # the next prepare of the claim reads it again, which is always right.
            log.debug("watch of claim %s/%s ended: %s", claim.namespace, claim.name, exc)
        if self._watches.get(claim.uid) is asyncio.current_task():
            self._forget(claim.uid)


def _pods(reserved_for: Any) -> tuple[str, ...]:
    """The pods among a claim's consumers (status.reservedFor: core-group "pods")."""
    return tuple(str(c.name) for c in reserved_for or [] if c.resource == "pods" and not c.apiGroup)


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
