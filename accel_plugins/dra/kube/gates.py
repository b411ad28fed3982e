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

Taint effect ``None`` (informational reasons, plugin/dra_taints.py) is known
from 1.35; an older API server with the gate on refuses it (422) rather than
dropping it. So the taint probe carries effect ``None``: kept means taints and
``None`` both work (one call, 1.35+); dropped means the gate is off; refused
means taints may work without ``None``, which a second dry-run with
``NoSchedule`` tells (``auto`` only: ``on`` taints anyway). Where ``None`` is
refused, informational reasons are published with ``NoSchedule``.
"""

from __future__ import annotations

import logging

from lightkube import ApiError, AsyncClient
from lightkube.resources.resource_v1 import ResourceSlice

from accel_plugins.dra.kube.api import ResourceApi
from accel_plugins.dra.kube.shares import ShareMode
from accel_plugins.dra.kube.slices import PoolIdentity, probe_shares_slice, probe_slice
from accel_plugins.dra.kube.taints import EFFECT, INFORMATIONAL_EFFECT, TaintMode

log = logging.getLogger(__name__)


class FieldGates:
    """The optional fields the node's slices carry, decided once and revised on a dropped write.

    ``taints`` and ``shares`` are None until :meth:`decide` has run; ``counters``
    starts True and turns False once a write comes back without them. ``sharing``
    says whether the backend has shared devices at all (a DraSharedUnits).
    ``informational`` (decided with ``taints``) says whether the API server takes
    taint effect None (1.35+); where False, informational reasons get NoSchedule.
    """

    def __init__(self, *, taints: TaintMode | str, shares: ShareMode | str, sharing: bool) -> None:
        self._taint_mode = TaintMode(taints)
        self._share_mode = ShareMode(shares)
        self._sharing = sharing
        self.taints: bool | None = None
        self.informational: bool | None = None
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
        """Taints on or off, and effect None with them or not, logged once; a dry-run
        create asks the API server (``off`` asks nothing)."""
        if self._taint_mode is TaintMode.OFF:
            self.taints = self.informational = False
            log.info("device taints: off (--dra-device-taints)")
            return
        first = await _probe_taints(client, api, identity, INFORMATIONAL_EFFECT)
        self.informational = first is True
        kept = first
        if first is None and self._taint_mode is TaintMode.AUTO:
            kept = await _probe_taints(client, api, identity, EFFECT)
        effects = ""
        if self.informational:
            effects = "; effect None for informational reasons, NoSchedule for the rest"
        elif first is None:
            effects = (
                "; effect NoSchedule for every reason (the API server refuses effect None, "
                "known from 1.35)"
            )
        if self._taint_mode is TaintMode.ON:
            self.taints = True
            log.info("device taints: on (--dra-device-taints)%s", effects)
        elif kept:
            self.taints = True
            log.info(
                "device taints: on (the API server keeps ResourceSlice device taints)%s", effects
            )
        else:
            self.taints = False
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


async def _probe_taints(
    client: AsyncClient, api: ResourceApi, identity: PoolIdentity, effect: str
) -> bool | None:
    """Dry-run create a slice with one device tainted with ``effect``: True where the
    taint is kept, False where dropped (gate off), None where refused (422: an effect
    the API server does not know, None before 1.35)."""
    probe = probe_slice(identity)
    for device in probe.spec.devices or []:
        for taint in device.taints or []:
            taint.effect = effect
    try:
        answer = api.from_wire(await client.create(api.to_wire(probe), dry_run=True))
    except ApiError as exc:
        if exc.status.code == 422:
            return None
        raise
    return any(d.taints for d in answer.spec.devices or [])


def _allows_multiple(found: ResourceSlice) -> bool:
    return any(d.allowMultipleAllocations for d in found.spec.devices or [])
