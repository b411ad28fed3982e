"""KubeClaimStatus: each prepared device in its ResourceClaim's ``status.devices``.

``kubectl get resourceclaim -o yaml`` then says which device a pod got: one entry per
prepared device (driver, pool, device and, for a share, ``shareID``: the list's keys),
a ``Ready`` condition, and ``data`` that names the device (the backend's ID and the
attributes the slices publish for it: NVIDIA's ``uuid``, ``pciBusID``, a MIG device's
``parentUUID`` and ``profile``; the generic ``path``). Unprepare removes them.

Written with server-side apply under the driver's own field manager, so each driver
owns its entries and leaves everyone else's alone (the list is a map keyed by
driver, pool, device and shareID: resource.k8s.io/v1 types.go ``AllocatedDeviceStatus``;
``status.devices`` is refused for a device the claim was not allocated). Applying an
empty list removes exactly what the manager wrote.

Authorization (kubernetes/kubernetes pkg/registry/resource/resourceclaim/strategy.go and
pkg/registry/resource/utils.go): ``update``/``patch`` of ``resourceclaims/status``;
from 1.36 (``DRAResourceClaimGranularStatusAuthorization``, beta) also
``associated-node:update``/``associated-node:patch`` on the synthetic
``resourceclaims/driver`` named after the driver, for a ServiceAccount token bound to
a pod on the claim's node. The chart grants both.

Writes are queued and made by one task, in order, so Prepare's answer never waits for
them and a claim's removal never overtakes its entry. A write that fails is logged and
dropped: a claim's status is for people and tools, the kubelet does not read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Sequence
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources import resource_v1, resource_v1beta1, resource_v1beta2
from lightkube.types import PatchType

from accel_plugins.dra.kube.api import GROUP, ApiVersions
from accel_plugins.dra.kube.slices import Describe
from accel_plugins.dra.model import ClaimRef, DeviceReport
from accel_plugins.plugin.dra_attributes import DraDeviceInfo, DraVersion

log = logging.getLogger(__name__)

READY = "Ready"
MAX_DATA_ATTRIBUTES = 32  # a slice's device has at most 32; data must stay under 10 Ki
_STATUS_TYPES: dict[str, Any] = {
    "v1": resource_v1.ResourceClaimStatus,
    "v1beta2": resource_v1beta2.ResourceClaimStatus,
    "v1beta1": resource_v1beta1.ResourceClaimStatus,
}


class KubeClaimStatus:
    """Writes claims' ``status.devices`` for ``driver`` on ``node`` (see the module)."""

    def __init__(
        self,
        client: AsyncClient,
        apis: ApiVersions,
        *,
        driver: str,
        node: str,
        describe: Describe | None = None,  # the slices' describer: the same attributes
    ) -> None:
        self._client = client
        self._apis = apis
        self.driver = driver
        self.node = node
        self._describe = describe
        self._queue: asyncio.Queue[tuple[ClaimRef, list[dict[str, Any]]]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._refused = False  # said once: the account may not write claim status
        self.writes = 0
        self.failures = 0

    # -- ClaimStatusSink ---------------------------------------------------------

    def claim_prepared(self, claim: ClaimRef, devices: Sequence[DeviceReport]) -> None:
        self._enqueue(claim, [self._entry(d) for d in devices])

    def claim_unprepared(self, claim: ClaimRef) -> None:
        self._enqueue(claim, [])

    async def idle(self) -> None:
        """Return once every queued write was made (or dropped)."""
        await self._queue.join()

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None

    # -- inside --------------------------------------------------------------------

    def _enqueue(self, claim: ClaimRef, entries: list[dict[str, Any]]) -> None:
        self._queue.put_nowait((claim, entries))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            claim, entries = await self._queue.get()
            try:
                await self._write(claim, entries)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a status write never stops the driver
                self.failures += 1
                self._log_failure(claim, exc)
            finally:
                self._queue.task_done()

    async def _write(self, claim: ClaimRef, entries: list[dict[str, Any]]) -> None:
        api = await self._apis.get()
        body = {
            "apiVersion": f"{GROUP}/{api.version}",
            "kind": "ResourceClaim",
            # The UID makes the write a precondition: never onto a claim made anew.
            "metadata": {"name": claim.name, "namespace": claim.namespace, "uid": claim.uid},
            "status": {"devices": entries},
        }
        await self._client.patch(
            _STATUS_TYPES[api.version],
            claim.name,
            body,
            namespace=claim.namespace,
            patch_type=PatchType.APPLY,
            field_manager=self.driver,
            force=True,
        )
        self.writes += 1

    def _log_failure(self, claim: ClaimRef, exc: Exception) -> None:
        where = f"ResourceClaim {claim.namespace}/{claim.name}"
        if isinstance(exc, ApiError) and exc.status.code in (404, 409):
            log.debug("%s is gone; its status is not written: %s", where, exc.status.message)
        elif isinstance(exc, ApiError) and _refused(exc):
            if not self._refused:
                self._refused = True
                log.warning(
                    "cannot write claim status (%s): the driver's account needs update/patch "
                    "of resourceclaims/status and, from Kubernetes 1.36, associated-node:"
                    "update/patch of resourceclaims/driver named %s; claims are prepared "
                    "all the same",
                    exc.status.message,
                    self.driver,
                )
        else:
            log.warning("%s: cannot write its status: %r", where, exc)

    def _entry(self, report: DeviceReport) -> dict[str, Any]:
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        message = f"prepared on node {self.node}" + (" for admin access" if report.admin else "")
        entry: dict[str, Any] = {
            "driver": self.driver,
            "pool": report.pool,
            "device": report.device,
            "conditions": [
                {
                    "type": READY,
                    "status": "True",
                    "reason": "Prepared",
                    "message": message,
                    "lastTransitionTime": now.isoformat().replace("+00:00", "Z"),
                }
            ],
            "data": self._data(report),
        }
        if report.share_id:
            entry["shareID"] = report.share_id
        return entry

    def _data(self, report: DeviceReport) -> dict[str, Any]:
        """What names the device: the backend's ID and resource, and its published
        attributes under their short names (``pciBusID``, ``uuid``, ``path``)."""
        data: dict[str, Any] = {"resource": report.resource, "id": report.backend_device.id}
        if report.admin:
            data["adminAccess"] = True
        info: DraDeviceInfo = (
            self._describe(report.resource, report.backend_device)
            if self._describe is not None
            else DraDeviceInfo()
        )
        for name, value in sorted(info.attributes.items())[:MAX_DATA_ATTRIBUTES]:
            data.setdefault(
                name.rpartition("/")[2], value.value if isinstance(value, DraVersion) else value
            )
        return data


def _refused(exc: ApiError) -> bool:
    """RBAC said no: 403, or 1.36's 422 for ``status.devices`` without the
    ``resourceclaims/driver`` verb (validation, not authorization, answers it)."""
    code, message = exc.status.code, str(exc.status.message or "")
    return code == 403 or (code == 422 and "resourceclaims/driver" in message)
