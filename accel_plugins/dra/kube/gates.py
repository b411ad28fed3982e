"""FieldGates: which optional ResourceSlice fields the API server keeps.

Device taints (``DRADeviceTaints``), ``allowMultipleAllocations``
(``DRAConsumableCapacity``) and shared counters (``DRAPartitionableDevices``)
sit behind feature gates, and an API server whose gate is off drops the field
without an error. So a field is published only where it survives: ``auto``
asks once with a dry-run create of a probe slice, and every real write is
checked afterwards, because ``on`` (or a gate turned off later) can still
lose it. Where a field is dropped the pool is built without it: Unhealthy
devices left out, shared devices published as copies, devices that use
counters left out, so nothing is handed out twice or to a broken device.
"""

from __future__ import annotations

import logging

from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceSlice

from accel_plugins.dra.kube.api import ResourceApi
from accel_plugins.dra.kube.shares import ShareMode
from accel_plugins.dra.kube.slices import PoolIdentity, probe_shares_slice, probe_slice
from accel_plugins.dra.kube.taints import TaintMode

log = logging.getLogger(__name__)


class FieldGates:
    """The optional fields the node's slices carry, decided once and revised on a dropped write.

    ``taints`` and ``shares`` are None until :meth:`decide` has run; ``counters``
    starts True and turns False once a write comes back without them. ``sharing``
    says whether the backend has shared devices at all (a DraSharedUnits).
    """

    def __init__(self, *, taints: TaintMode | str, shares: ShareMode | str, sharing: bool) -> None:
        self._taint_mode = TaintMode(taints)
        self._share_mode = ShareMode(shares)
        self._sharing = sharing
        self.taints: bool | None = None
        self.shares: bool | None = None
        self.counters = True  # until the API server drops them

    @property
    def decided(self) -> bool:
        return self.taints is not None and self.shares is not None

    async def decide(self, client: AsyncClient, api: ResourceApi, identity: PoolIdentity) -> None:
        """Settle what is still undecided (asking the API server where ``auto``)."""
        if self.taints is None:
            await self._decide_taints(client, api, identity)
        if self.shares is None:
            await self._decide_shares(client, api, identity)

    async def _decide_taints(
        self, client: AsyncClient, api: ResourceApi, identity: PoolIdentity
    ) -> None:
        """Taints on or off, logged once; ``auto`` asks the API server with a dry-run create."""
        if self._taint_mode is not TaintMode.AUTO:
            self.taints = self._taint_mode is TaintMode.ON
            log.info("device taints: %s (--dra-device-taints)", self._taint_mode.value)
            return
        probe = api.to_wire(probe_slice(identity))
        answer = api.from_wire(await client.create(probe, dry_run=True))
        self.taints = any(d.taints for d in answer.spec.devices or [])
        if self.taints:
            log.info("device taints: on (the API server keeps ResourceSlice device taints)")
        else:
            log.warning(
                "device taints: off (the API server drops ResourceSlice device taints: its "
                "feature gate DRADeviceTaints is off); Unhealthy devices are left out instead"
            )

    async def _decide_shares(
        self, client: AsyncClient, api: ResourceApi, identity: PoolIdentity
    ) -> None:
        """Shared devices once for several claims, or as copies; ``auto`` asks the API server."""
        if not self._sharing or self._share_mode is not ShareMode.AUTO:
            self.shares = self._sharing and self._share_mode is ShareMode.ON
            log.info("shared devices: %s (--dra-shared-devices)", self._share_mode.value)
            return
        probe = api.to_wire(probe_shares_slice(identity))
        answer = api.from_wire(await client.create(probe, dry_run=True))
        self.shares = _allows_multiple(answer)
        log.info(
            "shared devices: %s",
            "one device for several claims (the API server keeps allowMultipleAllocations)"
            if self.shares
            else "one device per copy (the API server drops allowMultipleAllocations: its "
            "feature gate DRAConsumableCapacity is off)",
        )

    def dropped(self, sent: ResourceSlice, written: ResourceSlice) -> bool:
        """Compare a write with its answer; True where a field was lost (rebuild the pool)."""
        # Every check runs (a list, not any() over a generator): one write can lose several.
        checks = (self._taints_dropped, self._shares_dropped, self._counters_dropped)
        return any([check(sent, written) for check in checks])

    def _taints_dropped(self, sent: ResourceSlice, written: ResourceSlice) -> bool:
        """The API server dropped our taints after all (``on`` where the gate is off)."""
        if any(d.taints for d in sent.spec.devices or []) and not any(
            d.taints for d in written.spec.devices or []
        ):
            log.error(
                "device taints: the API server drops them (feature gate DRADeviceTaints off?); "
                "Unhealthy devices are left out instead"
            )
            self.taints = False
            return True
        return False

    def _shares_dropped(self, sent: ResourceSlice, written: ResourceSlice) -> bool:
        """The API server dropped allowMultipleAllocations (``on`` where the gate is off):
        publish the copies instead, rather than one device for one claim at a time."""
        if _allows_multiple(sent) and not _allows_multiple(written):
            log.error(
                "shared devices: the API server drops allowMultipleAllocations (feature gate "
                "DRAConsumableCapacity off?); publishing one device per copy instead"
            )
            self.shares = False
            return True
        return False

    def _counters_dropped(self, sent: ResourceSlice, written: ResourceSlice) -> bool:
        """The API server dropped the shared counters (its DRAPartitionableDevices gate is off)."""
        used = [d.name for d in sent.spec.devices or [] if d.consumesCounters]
        kept = [d.name for d in written.spec.devices or [] if d.consumesCounters]
        if (sent.spec.sharedCounters and not written.spec.sharedCounters) or (used and not kept):
            log.error(
                "shared counters: the API server drops them (feature gate "
                "DRAPartitionableDevices off?); devices that use them are left out"
            )
            self.counters = False
            return True
        return False


def _allows_multiple(found: ResourceSlice) -> bool:
    return any(d.allowMultipleAllocations for d in found.spec.devices or [])
