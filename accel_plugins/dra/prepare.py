"""Prepare and unprepare claims: the work behind the kubelet's DRA calls, free of gRPC.

For each claim the API side says which of our devices it was allocated
(:class:`~accel_plugins.dra.model.ClaimSource`); each DRA device name leads
back to the backend's device through the same mapping the slices were
published from (``device_names``). Each request of the claim gets what the
device-plugin path would give a container holding those devices (the
backend's ``allocate`` hook, else the framework's merge), written as one CDI
device of the claim's spec. Answers are kept (memory and checkpoint), so a
claim prepared twice is answered the same without another API read, and a
restarted plugin still knows what it prepared.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from accel_plugins.dra import claim_cdi
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from accel_plugins.dra.model import AllocatedDevice, ClaimError, ClaimRef, ClaimSource, NamedDevice
from accel_plugins.errors import AllocationError, HookError
from accel_plugins.plugin import allocation
from accel_plugins.plugin.backend import Allocator
from accel_plugins.plugin.cdi import CdiDevice, CdiSpec
from accel_plugins.plugin.device import ContainerAllocation, Device
from accel_plugins.plugin.dra_taints import TaintId

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inventory:
    """What the backend serves now: devices by DRA name, and its allocate hook."""

    devices: Mapping[str, NamedDevice] = field(default_factory=lambda: MappingProxyType({}))
    allocator: Allocator | None = None
    hook_timeout: float = 10.0


PrepareResult = PreparedClaim | str
"""A prepared claim, or why it could not be prepared (goes in the claim's ``error``)."""


class Preparer:
    """Prepares claims for ``driver`` in ``pool`` (the node's name).

    ``inventory`` is read at each call, so the driver swaps it on every tree
    and backend restart. Calls are serialized: the kubelet rarely overlaps
    them, and one lock keeps the checkpoint equal to what is on disk.
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
    ) -> None:
        self.driver = driver
        self._taint = taint  # an Unhealthy device's taint in the slices, when they carry one
        self.pool = pool
        self._claims = claims
        self._cdi_dir = cdi_dir
        self._checkpoint = checkpoint
        self._inventory = inventory
        self._lock = asyncio.Lock()
        self._prepared: dict[str, PreparedClaim] = checkpoint.load()
        if self._prepared:
            log.info("checkpoint: %d prepared claims kept from before", len(self._prepared))

    @property
    def prepared(self) -> Mapping[str, PreparedClaim]:
        return MappingProxyType(self._prepared)

    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        async with self._lock:
            results: dict[str, PrepareResult] = {}
            todo: dict[str, ClaimRef] = {}
            for ref in refs:
                known = self._prepared.get(ref.uid)
                if known is not None:
                    results[ref.uid] = known  # idempotent: the same answer, no API read
                else:
                    todo[ref.uid] = ref
            fresh = await asyncio.gather(*(self._prepare_one(ref) for ref in todo.values()))
            made = {
                uid: result
                for uid, result in zip(todo, fresh, strict=True)
                if isinstance(result, PreparedClaim)
            }
            errors = {uid: r for uid, r in zip(todo, fresh, strict=True) if isinstance(r, str)}
            if made:
                try:
                    await asyncio.to_thread(self._checkpoint.save, {**self._prepared, **made})
                except OSError as exc:
                    # Not remembered means not prepared: the kubelet tries again.
                    log.error("cannot write the checkpoint %s: %s", self._checkpoint.path, exc)
                    for uid, claim in made.items():
                        self._remove_spec(claim.spec_file)
                        errors[uid] = f"cannot write the checkpoint: {exc.strerror or exc}"
                    made = {}
                self._prepared.update(made)
            results.update(made)
            results.update(errors)
            return results

    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID -> error ("" when done). Unknown claims are done already."""
        async with self._lock:
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
                for uid in set(self._prepared) - set(remaining):
                    log.info("claim %s unprepared", uid)
                self._prepared = remaining
            return results

    # -- one claim ---------------------------------------------------------------

    async def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        try:
            return await self._build(ref)
        except ClaimError as exc:
            log.warning("claim %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, exc)
            return str(exc)
        except OSError as exc:
            log.error("claim %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, exc)
            return f"cannot write the claim's CDI spec: {exc}"
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
        extra_ids: dict[str, tuple[str, ...]] = {}
        for request, entries in by_request.items():
            answer = await self._allocate(inventory, [named for _, named in entries])
            edits = claim_cdi.allocation_edits(answer)
            ids: tuple[str, ...] = ()
            if edits:  # CDI refuses a device without edits
                cdi_devices.append(CdiDevice(claim_cdi.cdi_device_name(ref.uid, request), edits))
                ids = (claim_cdi.qualified_device(self.driver, ref.uid, request),)
            # Names of the backend's own specs (CDI device-list strategies) come along.
            extra_ids[request] = ids + tuple(c for c in answer.cdi_devices if c not in ids)

        spec_file: str | None = None
        if cdi_devices:
            spec_file = claim_cdi.spec_file_name(self.driver, ref.uid)
            spec = CdiSpec(claim_cdi.claim_kind(self.driver), tuple(cdi_devices))
            path = await asyncio.to_thread(claim_cdi.write_spec, self._cdi_dir, spec_file, spec)
            log.info("claim %s/%s (%s): CDI spec %s", ref.namespace, ref.name, ref.uid, path)

        # The request's CDI IDs go with its first device only: the kubelet gathers the
        # IDs of every device a container gets, and one request is one CDI device.
        devices: list[PreparedDevice] = []
        given: set[str] = set()
        for result in resolved.devices:
            first = result.request not in given
            given.add(result.request)
            devices.append(
                PreparedDevice(
                    requests=(result.request,),
                    pool=result.pool,
                    device=result.device,
                    cdi_ids=extra_ids[result.request] if first else (),
                )
            )
        return PreparedClaim(ref, tuple(devices), spec_file)

    def _check_tolerated(self, result: AllocatedDevice, named: NamedDevice) -> None:
        """An Unhealthy device is prepared only for a claim that tolerates its taint (the
        scheduler allocated it so on purpose); ClaimError, naming reason and taint, else."""
        device = named.device
        why = f" ({device.reason})" if device.reason is not None else ""
        if self._taint is None:
            raise ClaimError(f"device {result.device} is unhealthy{why}")
        taint = self._taint(named.resource, device)
        if any(t.tolerates(taint) for t in result.tolerations):
            log.info("device %s is unhealthy%s; the claim tolerates it", result.device, why)
            return
        raise ClaimError(
            f"device {result.device} is unhealthy{why} and the claim does not tolerate its "
            f"taint {taint.key}={taint.value}:{taint.effect}"
        )

    async def _allocate(
        self, inventory: Inventory, named: Sequence[NamedDevice]
    ) -> ContainerAllocation:
        """The device-plugin answer for these devices, one resource at a time, merged."""
        by_resource: dict[str, list[Device]] = {}
        for entry in named:
            by_resource.setdefault(entry.resource, []).append(entry.device)
        answers = [
            await self._allocate_resource(inventory, resource, devices)
            for resource, devices in by_resource.items()
        ]
        return answers[0] if len(answers) == 1 else _combine(answers)

    async def _allocate_resource(
        self, inventory: Inventory, resource: str, devices: Sequence[Device]
    ) -> ContainerAllocation:
        hook = inventory.allocator
        if hook is None:
            return allocation.merge(devices)
        timeout = inventory.hook_timeout
        try:
            # Vendor code: off the event loop, with the framework's deadline.
            return await asyncio.wait_for(
                asyncio.to_thread(hook.allocate, resource, devices), timeout
            )
        except (AllocationError, HookError) as exc:
            raise ClaimError(f"resource {resource}: {exc}") from None
        except TimeoutError:
            raise ClaimError(
                f"resource {resource}: allocate did not answer within {timeout:g}s"
            ) from None

    def _remove_spec(self, spec_file: str | None) -> None:
        if spec_file is not None:
            try:
                claim_cdi.remove_spec(self._cdi_dir, spec_file)
            except OSError as exc:
                log.error("cannot remove the CDI spec %s: %s", spec_file, exc)


def _combine(answers: Sequence[ContainerAllocation]) -> ContainerAllocation:
    """Several resources' answers as one (nodes and mounts once per container path)."""
    nodes = {n.container_path: n for a in answers for n in a.nodes}
    mounts = {m.container_path: m for a in answers for m in a.mounts}
    return ContainerAllocation(
        nodes=tuple(nodes.values()),
        mounts=tuple(mounts.values()),
        envs={k: v for a in answers for k, v in a.envs.items()},
        annotations={k: v for a in answers for k, v in a.annotations.items()},
        cdi_devices=tuple(dict.fromkeys(c for a in answers for c in a.cdi_devices)),
    )
