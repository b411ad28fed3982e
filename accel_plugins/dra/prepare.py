"""Prepare and unprepare claims: the work behind the kubelet's DRA calls, free of gRPC.

For each claim the API side says which of our devices it was allocated
(:class:`~accel_plugins.dra.model.ClaimSource`); each DRA device name leads
back to the backend's device through the same mapping the slices were
published from (``device_names``). Each request of the claim gets what the
device-plugin path would give a container holding those devices (the
backend's ``allocate`` hook, else the framework's merge), written as one CDI
device of the claim's spec. Answers are kept (memory and checkpoint), so a
claim prepared twice is answered the same without another API read, and a
restarted plugin still knows what it prepared. No answer names a CDI device
that no spec on disk defines (``spec_guard``): a claim prepared again is
checked, and its specs written again, first; after a reboot every recorded
claim spec is written again at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from accel_plugins.dra import claim_answer, claim_cdi
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from accel_plugins.dra.model import (
    AllocatedDevice,
    ClaimError,
    ClaimRef,
    ClaimSource,
    ClaimStatusSink,
    DeviceReport,
    NamedDevice,
)
from accel_plugins.dra.spec_guard import SpecGuard
from accel_plugins.plugin.backend import Allocator, CdiSpecKeeper
from accel_plugins.plugin.cdi import CdiDevice, CdiSpec
from accel_plugins.plugin.device import Device
from accel_plugins.plugin.dra_config import DraConfigAllocator
from accel_plugins.plugin.dra_shares import DraShareLimits
from accel_plugins.plugin.dra_taints import TaintId, tolerated
from accel_plugins.util.flock import FileLock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inventory:
    """What the backend serves now: devices by DRA name, its allocate hook, what keeps
    its own CDI specs on disk (None when it writes none), its hook for claims with
    opaque parameters and what limits a share of a shared device."""

    devices: Mapping[str, NamedDevice] = field(default_factory=lambda: MappingProxyType({}))
    allocator: Allocator | None = None
    hook_timeout: float = 10.0
    cdi_keeper: CdiSpecKeeper | None = None
    configurer: DraConfigAllocator | None = None
    share_limits: DraShareLimits | None = None


PrepareResult = PreparedClaim | str
"""A prepared claim, or why it could not be prepared (goes in the claim's ``error``)."""


class Preparer:
    """Prepares claims for ``driver`` in ``pool`` (the node's name).

    ``inventory`` is read at each call, so the driver swaps it on every tree
    and backend restart. Calls are serialized: the kubelet rarely overlaps
    them, and one lock keeps the checkpoint equal to what is on disk. With
    ``shared`` (a file lock) they are serialized across the driver's instances
    too, each call starting from the checkpoint as the last one left it: during a
    rolling update the kubelet may prepare a claim through one pod and unprepare
    it through the other.
    """

    def __init__(
        self,
        *,
        driver: str,
        pool: str,
        claims: ClaimSource,
        cdi_dir: Path,
        checkpoint: Checkpoint,
        inventory: Callable[[], Inventory],
        taint: Callable[[str, Device], TaintId] | None = None,
        shared: FileLock | None = None,
    ) -> None:
        self.driver = driver
        self._shared = shared
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._taint = taint  # an Unhealthy device's taint in the slices, when they carry one
        self.pool = pool
        self._claims = claims
        self._cdi_dir = cdi_dir
        self._checkpoint = checkpoint
        self._inventory = inventory
        self._lock = asyncio.Lock()
        self._guard = SpecGuard(driver, cdi_dir)
        saved = checkpoint.read()
        self._prepared: dict[str, PreparedClaim] = saved.claims
        self._saved_boot = saved.boot_id
        if self._prepared:
            log.info("checkpoint: %d prepared claims kept from before", len(self._prepared))

    @property
    def prepared(self) -> Mapping[str, PreparedClaim]:
        return MappingProxyType(self._prepared)

    async def drained(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the calls in flight to finish (False: some did not).

        A stopping driver waits for them before it deregisters: the kubelet drops its
        connection to a deregistered socket, failing whatever it was still waiting for.
        """
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    @contextlib.asynccontextmanager
    async def _serialized(self) -> AsyncIterator[None]:
        """One call at a time here, and with ``shared`` across the driver's instances."""
        self._in_flight += 1
        self._idle.clear()
        try:
            async with self._serialized_call():
                yield
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def _serialized_call(self) -> AsyncIterator[None]:
        async with self._lock:
            if self._shared is None:
                yield
                return
            async with self._shared.locked():
                if self._checkpoint.changed():
                    self._prepared = self._checkpoint.read().claims
                yield

    async def restore(self) -> None:
        """At start: write again every recorded claim spec that is missing or changed.

        A boot ID other than the checkpoint's means the node rebooted since the
        claims were prepared: their specs went with the tmpfs, while the
        devices and the edits that reach them did not change. NVIDIA's driver
        drops its checkpoint then, because its Prepare made MIG devices that a
        reboot destroys; ours made nothing but the spec, so the recorded edits
        are written again and the kubelet's repeated Prepare gets the same
        answer. A checkpoint without a boot ID (older) is taken as this boot's,
        as NVIDIA does; the specs are checked all the same.
        """
        async with self._serialized():
            current = self._checkpoint.boot_id
            previous = self._saved_boot
            if self._prepared and None not in (current, previous) and current != previous:
                log.warning(
                    "the node rebooted since %d claims were prepared (boot %s, now %s): "
                    "writing their CDI specs again from the checkpoint",
                    len(self._prepared),
                    previous,
                    current,
                )
            written = await asyncio.to_thread(self._rewrite_claim_specs)
            if written:
                log.info("CDI specs of %d prepared claims written again", written)
            if self._prepared and current is not None and current != previous:
                try:
                    await asyncio.to_thread(self._checkpoint.save, self._prepared)
                except OSError as exc:
                    log.error("cannot write the checkpoint %s: %s", self._checkpoint.path, exc)
                    return
            self._saved_boot = current

    def _rewrite_claim_specs(self) -> int:
        written = 0
        for claim in self._prepared.values():
            try:
                written += self._guard.rewrite_claim_spec(claim)
            except OSError as exc:  # its Prepare tries again and reports it
                log.error("cannot write the CDI spec %s: %s", claim.spec_file, exc)
        return written

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        made: dict[str, PreparedClaim] = {}
        async with self._serialized():
            results: dict[str, PrepareResult] = {}
            todo: dict[str, ClaimRef] = {}
            for ref in refs:
                known = self._prepared.get(ref.uid)
                # Idempotent: the same answer without an API read, once its specs are there.
                answer = None if known is None else await self._answer_known(known)
                if answer is None:
                    todo[ref.uid] = ref
                else:
                    results[ref.uid] = answer
            fresh = await asyncio.gather(*(self._prepare_one(ref) for ref in todo.values()))
            made.update(
                (uid, result)
                for uid, result in zip(todo, fresh, strict=True)
                if isinstance(result, PreparedClaim)
            )
            errors = {uid: r for uid, r in zip(todo, fresh, strict=True) if isinstance(r, str)}
            if made:
                # Specs and checkpoint in one trip to a worker thread: the hot path.
                errors.update(await asyncio.to_thread(self._persist, made))
                for uid in errors:
                    made.pop(uid, None)
                self._prepared.update(made)
            results.update(made)
            results.update(errors)
        self._report(made)
        return results

    def _report(self, made: Mapping[str, PreparedClaim]) -> None:
        """Tell the claims' status what they were prepared with, where the claim source
        writes it (queued: Prepare's answer does not wait for the API server)."""
        if not made or not isinstance(self._claims, ClaimStatusSink):
            return
        devices = self._inventory().devices
        for claim in made.values():
            self._claims.claim_prepared(
                claim.ref,
                [
                    DeviceReport(
                        d.pool, d.device, d.share_id, named.resource, named.device, d.admin
                    )
                    for d in claim.devices
                    if (named := devices.get(d.device)) is not None
                ],
            )

    def _persist(self, made: dict[str, PreparedClaim]) -> dict[str, str]:
        """Write the new claims' specs, then the checkpoint with them (worker thread).

        Returns the claims that failed, with their errors: a spec that cannot be
        written fails its claim; a checkpoint that cannot be written fails them
        all and removes their specs (not remembered means not prepared: the
        kubelet tries again).
        """
        errors: dict[str, str] = {}
        for uid, claim in made.items():
            if claim.spec_file is None or claim.spec_text is None:
                continue
            try:
                path = claim_cdi.write_text(self._cdi_dir, claim.spec_file, claim.spec_text)
            except OSError as exc:
                log.error("claim %s (%s): %s", claim.ref.name, uid, exc)
                errors[uid] = f"cannot write the claim's CDI spec: {exc}"
                continue
            log.info(
                "claim %s/%s (%s): CDI spec %s", claim.ref.namespace, claim.ref.name, uid, path
            )
        kept = {uid: c for uid, c in made.items() if uid not in errors}
        if not kept:
            return errors
        try:
            self._checkpoint.save({**self._prepared, **kept})
        except OSError as exc:
            log.error("cannot write the checkpoint %s: %s", self._checkpoint.path, exc)
            for uid, claim in kept.items():
                self._remove_spec(claim.spec_file)
                errors[uid] = f"cannot write the checkpoint: {exc.strerror or exc}"
        return errors

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID -> error ("" when done). Unknown claims are done already."""
        async with self._serialized():
            results: dict[str, str] = {}
            remaining = dict(self._prepared)
            for ref in refs:
                claim = remaining.pop(ref.uid, None)
                # By name too: a spec written just before a crash, never checkpointed.
                spec = (
                    claim.spec_file
                    if claim is not None
                    else claim_cdi.spec_file_name(self.driver, ref.uid)
                )
                try:
                    if spec is not None:
                        claim_cdi.remove_spec(self._cdi_dir, spec)
                except OSError as exc:
                    results[ref.uid] = f"cannot remove the CDI spec {spec}: {exc.strerror or exc}"
                    if claim is not None:
                        remaining[ref.uid] = claim
                    continue
                results[ref.uid] = ""
            if len(remaining) != len(self._prepared):
                try:
                    await asyncio.to_thread(self._checkpoint.save, remaining)
                except OSError as exc:
                    log.error("cannot write the checkpoint %s: %s", self._checkpoint.path, exc)
                    for uid in set(self._prepared) - set(remaining):
                        results[uid] = f"cannot write the checkpoint: {exc.strerror or exc}"
                    return results
                gone = [self._prepared[uid] for uid in set(self._prepared) - set(remaining)]
                for claim in gone:
                    log.info("claim %s unprepared", claim.ref.uid)
                    if isinstance(self._claims, ClaimStatusSink):
                        self._claims.claim_unprepared(claim.ref)
                self._prepared = remaining
            return results

    # -- one claim ---------------------------------------------------------------

    async def _answer_known(self, claim: PreparedClaim) -> PrepareResult | None:
        """The recorded answer once every name it gives is defined on disk; None to
        prepare the claim afresh (its spec is gone and an older checkpoint has no
        record to write it from)."""
        ref = claim.ref
        inventory = self._inventory()
        try:
            try:
                if await asyncio.to_thread(self._guard.rewrite_claim_spec, claim):
                    log.warning(
                        "claim %s/%s (%s): CDI spec %s was missing or changed: written again",
                        ref.namespace,
                        ref.name,
                        ref.uid,
                        claim.spec_file,
                    )
            except OSError as exc:
                raise ClaimError(f"cannot write the claim's CDI spec: {exc}") from None
            if self._guard.backend_names(claim.cdi_ids):
                resources = {
                    inventory.devices[d.device].resource
                    for d in claim.devices
                    if d.device in inventory.devices
                }
                await self._guard.ensure_backend_specs(
                    inventory.cdi_keeper, resources, inventory.hook_timeout
                )
            await self._guard.check_defined(claim.cdi_ids)
        except ClaimError as exc:
            if claim.spec_text is None and claim.spec_file is not None:
                log.info("claim %s (%s): %s; preparing it again", ref.name, ref.uid, exc)
                return None
            if not exc.logged:
                log.warning("claim %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, exc)
            return str(exc)
        return claim

    async def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        try:
            return await self._build(ref)
        except ClaimError as exc:
            if not exc.logged:
                log.warning("claim %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, exc)
            return str(exc)
        except Exception as exc:
            # The API side or a backend hook failed in a way nobody planned for: this
            # claim fails, the others and the plugin go on.
            log.exception("claim %s/%s (%s): preparing failed", ref.namespace, ref.name, ref.uid)
            return f"preparing failed: {exc!r}"

    async def _build(self, ref: ClaimRef) -> PreparedClaim:
        resolved = await self._claims.resolve(ref, self.driver, self.pool)
        if not resolved.devices:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name} has no devices of driver {self.driver} "
                f"in pool {self.pool}"
            )
        inventory = self._inventory()
        by_request: dict[str, list[tuple[AllocatedDevice, NamedDevice]]] = {}
        for result in resolved.devices:
            named = inventory.devices.get(result.device)
            if named is None:
                raise ClaimError(
                    f"device {result.device} (request {result.request}) is not served on "
                    f"node {self.pool} by driver {self.driver}"
                )
            if not named.device.healthy:
                self._check_tolerated(result, named)
            by_request.setdefault(result.request, []).append((result, named))

        cdi_devices: list[CdiDevice] = []
        extra_ids: dict[tuple[str, str], tuple[str, ...]] = {}
        for part in claim_answer.parts([e for entries in by_request.values() for e in entries]):
            configs = [c for c in resolved.configs if c.applies_to(part.request)]
            answer = await claim_answer.answer(inventory, self.driver, part, configs)
            edits = claim_cdi.allocation_edits(answer)
            ids: tuple[str, ...] = ()
            if edits:  # CDI refuses a device without edits
                share = part.share_id
                cdi_devices.append(
                    CdiDevice(claim_cdi.cdi_device_name(ref.uid, part.request, share), edits)
                )
                ids = (claim_cdi.qualified_device(self.driver, ref.uid, part.request, share),)
            # Names of the backend's own specs (CDI device-list strategies) come along.
            key = (part.request, part.share_id)
            extra_ids[key] = ids + tuple(c for c in answer.cdi_devices if c not in ids)

        # The spec is written with the checkpoint (prepare's _persist), once all is checked.
        spec_file: str | None = None
        spec_text: str | None = None
        if cdi_devices:
            spec_file = claim_cdi.spec_file_name(self.driver, ref.uid)
            spec_text = CdiSpec(claim_cdi.claim_kind(self.driver), tuple(cdi_devices)).text()
        # The claim's own names are defined by the spec just written; the backend's are
        # checked on disk after the backend has written again whatever went missing.
        theirs = self._guard.backend_names([c for ids in extra_ids.values() for c in ids])
        if theirs:
            await self._guard.ensure_backend_specs(
                inventory.cdi_keeper,
                {named.resource for entries in by_request.values() for _, named in entries},
                inventory.hook_timeout,
            )
            await self._guard.check_defined(theirs)

        # A part's CDI IDs go with its first device only: the kubelet gathers the IDs
        # of every device a container gets, and one part is one CDI device.
        devices: list[PreparedDevice] = []
        given: set[tuple[str, str]] = set()
        for result in resolved.devices:
            key = (result.request, result.share_id)
            first = key not in given
            given.add(key)
            # A container names the main request of "gpu/large", and the kubelet matches
            # request names exactly (claiminfo.go cdiDevicesAsList; kubeletplugin sends the
            # main name only): both names, so a container naming either gets the device.
            main = result.request.partition("/")[0]
            devices.append(
                PreparedDevice(
                    requests=tuple(dict.fromkeys((main, result.request))),
                    pool=result.pool,
                    device=result.device,
                    cdi_ids=extra_ids[key] if first else (),
                    share_id=result.share_id,
                    admin=result.admin_access,
                )
            )
        return PreparedClaim(ref, tuple(devices), spec_file, spec_text, resolved.consumers)

    def _check_tolerated(self, result: AllocatedDevice, named: NamedDevice) -> None:
        """An Unhealthy device is prepared only for a claim that tolerates its taint (the
        scheduler allocated it so on purpose); ClaimError, naming reason and taint, else."""
        device = named.device
        why = f" ({device.reason})" if device.reason is not None else ""
        if self._taint is None:
            raise ClaimError(f"device {result.device} is unhealthy{why}")
        taint = self._taint(named.resource, device)
        if tolerated(taint, result.tolerations):
            log.info("device %s is unhealthy%s; the claim tolerates it", result.device, why)
            return
        raise ClaimError(
            f"device {result.device} is unhealthy{why} and the claim does not tolerate its "
            f"taint {taint.key}={taint.value}:{taint.effect}"
        )

    def _remove_spec(self, spec_file: str | None) -> None:
        if spec_file is not None:
            try:
                claim_cdi.remove_spec(self._cdi_dir, spec_file)
            except OSError as exc:
                log.error("cannot remove the CDI spec %s: %s", spec_file, exc)
