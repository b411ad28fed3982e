"""Resource claims of admitted pods, prepared as the kubelet's DRA manager prepares them.

After a pod is admitted and before its containers start, the kubelet calls
``PrepareResources`` of its DRA manager (``pkg/kubelet/cm/dra/manager.go``),
and when the pod is gone, ``UnprepareResources``. The emulator does what they
do, against a real API server:

1. For each ``spec.resourceClaims`` entry, GET the ResourceClaim in the pod's
   namespace (``fetch ResourceClaim <name>: ...`` when that fails), check the
   claim may be used by the pod (``status.reservedFor``) and that it is
   allocated (``status.allocation``, written by the scheduler); the drivers
   to call are those named in the allocation's results. Every claim is
   checked before any driver is called, so a bad pod prepares nothing.
2. One ``NodePrepareResources`` per driver with that driver's claims; an
   error of one claim (its ``error``) or a claim left out of the answer fails
   the pod, with the kubelet's messages.
3. Each container gets the CDI device IDs of the claims it names in
   ``resources.claims``: all of a claim's devices, or with ``request`` set
   only devices whose request names include it (``cdiDevicesAsList`` in
   ``claiminfo.go``; a device without request names goes to every request).
4. Unpreparing a pod calls ``NodeUnprepareResources`` per driver for the
   claims no other admitted pod still uses.

Where the emulator differs: its pods are not API objects, so ``reservedFor``
is matched by pod name (the kubelet matches UIDs), and a claim reserved for
no one is accepted (no scheduler reserves claims for an emulated pod); a
driver that has not registered yet is waited for (``--admit-timeout``), where
the kubelet fails the attempt and retries the pod later.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from accel_plugins.kubelet_emulator.cdi import DEFAULT_SPEC_DIRS, CdiEdits, find_device
from accel_plugins.kubelet_emulator.dra import DraClaim, DraClaimResult, DraDevice
from accel_plugins.kubelet_emulator.emulator import Kubelet
from accel_plugins.kubelet_emulator.errors import KubeletError, PluginCallError
from accel_plugins.kubelet_emulator.podspec import ContainerSpec, PodSpec


class ClaimPrepareError(KubeletError):
    """The pod's claims cannot be prepared; the message is the kubelet's."""


@dataclass(frozen=True, slots=True)
class AllocatedResult:
    """One entry of ``status.allocation.devices.results``."""

    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """What the DRA manager reads of a ResourceClaim."""

    namespace: str
    name: str
    uid: str
    allocated: bool
    results: tuple[AllocatedResult, ...] = ()
    reserved_for_pods: tuple[str, ...] = ()  # names of pods in status.reservedFor
    controller_uids: tuple[str, ...] = ()  # ownerReferences with controller: true

    @property
    def drivers(self) -> list[str]:
        return sorted({r.driver for r in self.results})

    @property
    def ref(self) -> DraClaim:
        return DraClaim(namespace=self.namespace, name=self.name, uid=self.uid)


class ClaimReader(Protocol):
    """Reads ResourceClaims from the API server (``kubelet_emulator.claim_api``)."""

    async def get(self, namespace: str, name: str) -> ClaimInfo:
        """The claim; ClaimPrepareError with the API's reason when it cannot be read."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    """A claim of the pod after NodePrepareResources: the pod's name for it and each
    driver's answer."""

    pod_claim: str
    claim: ClaimInfo
    results: Mapping[str, DraClaimResult] = field(hash=False)  # driver -> answer

    @property
    def devices(self) -> list[tuple[str, DraDevice]]:
        return [(d, device) for d, r in sorted(self.results.items()) for device in r.devices]

    def cdi_ids(self, request: str) -> list[str]:
        """cdiDevicesAsList: every device's IDs for "", else devices of that request."""
        ids: list[str] = []
        for _, device in self.devices:
            if not request or not device.requests or request in device.requests:
                ids += device.cdi_ids
        return ids


@dataclass(frozen=True, slots=True)
class ContainerClaims:
    """What one container gets: per ``resources.claims`` entry, the CDI device IDs."""

    container: ContainerSpec
    cdi_ids: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (claim[/request], ids)


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The outcome of preparing one pod's claims; ``error`` "" when they were prepared."""

    pod: PodSpec
    claims: tuple[PreparedClaim, ...] = ()
    containers: tuple[ContainerClaims, ...] = ()
    error: str = ""

    @property
    def prepared(self) -> bool:
        return not self.error


class ClaimPreparer:
    """Prepares and unprepares the claims of pods on a running emulator.

    Claims are tracked by UID with the pods using them, as the DRA manager's
    claim info cache does, so a claim two pods share is prepared once and
    unprepared when the last of them goes.
    """

    def __init__(
        self,
        kubelet: Kubelet,
        reader: ClaimReader,
        *,
        cdi_spec_dirs: Sequence[Path] = DEFAULT_SPEC_DIRS,
        driver_timeout: float = 30.0,
    ) -> None:
        self.kubelet = kubelet
        self.reader = reader
        self.cdi_spec_dirs = tuple(Path(d) for d in cdi_spec_dirs)
        self.driver_timeout = driver_timeout
        self._prepared: dict[str, tuple[PreparedClaim, set[str]]] = {}  # uid -> claim, pods

    @property
    def prepared_claims(self) -> list[ClaimInfo]:
        return [claim.claim for claim, _ in self._prepared.values()]

    async def prepare(self, pod: PodSpec) -> PodClaims:
        """Prepare the pod's claims; never raises for a claim that cannot be prepared."""
        try:
            claims = await self._prepare(pod)
        except ClaimPrepareError as e:
            return PodClaims(pod, error=f"prepare dynamic resources: {e}")
        return PodClaims(pod, tuple(claims), tuple(self._containers(pod, claims)))

    async def _prepare(self, pod: PodSpec) -> list[PreparedClaim]:
        infos: list[tuple[str, ClaimInfo]] = []
        for pod_claim in pod.resource_claims:
            if pod_claim.claim_name is None:
                if pod_claim.generated:
                    continue  # the controller created no claim: none was needed
                raise ClaimPrepareError(
                    f"pod claim {pod_claim.name}: no ResourceClaim from template "
                    f"{pod_claim.template} yet (the pod's status.resourceClaimStatuses, which the "
                    "ResourceClaim controller writes, has no entry for it)"
                )
            info = await self.reader.get(pod.namespace, pod_claim.claim_name)
            if pod_claim.template and pod.uid and pod.uid not in info.controller_uids:
                # resourceclaim.IsForPod: a claim from a template belongs to its pod alone.
                raise ClaimPrepareError(
                    f"ResourceClaim {info.name} ({info.uid}) was not created for pod "
                    f"{pod.key} ({pod.uid})"
                )
            reserved = info.reserved_for_pods
            if reserved and pod.name not in reserved:
                raise ClaimPrepareError(
                    f"pod {pod.name} is not allowed to use ResourceClaim {info.name} "
                    f"({info.uid}): reserved for {', '.join(reserved)}"
                )
            if not info.allocated:
                raise ClaimPrepareError(f"ResourceClaim {info.name}: not allocated")
            infos.append((pod_claim.name, info))
        await self._wait_for_drivers({d for _, info in infos for d in info.drivers})
        batches: dict[str, list[ClaimInfo]] = {}
        for _, info in infos:
            if info.uid in self._prepared:
                continue  # prepared already for another pod
            for driver in info.drivers:
                batch = batches.setdefault(driver, [])
                if info.uid not in {c.uid for c in batch}:
                    batch.append(info)
        answers: dict[str, dict[str, DraClaimResult]] = {}  # uid -> driver -> result
        try:
            for driver, batch in sorted(batches.items()):
                for uid, result in (await self._call_prepare(driver, batch)).items():
                    answers.setdefault(uid, {})[driver] = result
        finally:
            # Remembered even when a call failed: the kubelet checkpoints the claims
            # before calling, so removing the pod unprepares what a driver may hold.
            self._remember(pod, infos, answers)
        return [
            PreparedClaim(pod_claim, info, self._prepared[info.uid][0].results)
            for pod_claim, info in infos
        ]

    def _remember(
        self,
        pod: PodSpec,
        infos: Sequence[tuple[str, ClaimInfo]],
        answers: Mapping[str, Mapping[str, DraClaimResult]],
    ) -> None:
        for pod_claim, info in infos:
            known = self._prepared.get(info.uid)
            if known is None:
                claim = PreparedClaim(pod_claim, info, answers.get(info.uid, {}))
                self._prepared[info.uid] = (claim, {pod.key})
            else:
                known[1].add(pod.key)

    async def _wait_for_drivers(self, drivers: Iterable[str]) -> None:
        wanted = sorted(set(drivers))

        def missing(k: Kubelet) -> list[str]:
            return [d for d in wanted if d not in k.dra.names]

        with contextlib.suppress(TimeoutError):
            await self.kubelet.wait_for(
                lambda k: not missing(k), self.driver_timeout, what="the claims' DRA drivers"
            )
        if missing(self.kubelet):
            raise ClaimPrepareError(
                f"DRA driver {', '.join(missing(self.kubelet))} is not registered "
                f"(waited {self.driver_timeout:g}s)"
            )

    async def _call_prepare(
        self, driver: str, claims: Sequence[ClaimInfo]
    ) -> dict[str, DraClaimResult]:
        try:
            answer = await self.kubelet.dra.client(driver).prepare([c.ref for c in claims])
        except PluginCallError as e:
            raise ClaimPrepareError(f"NodePrepareResources: {e}") from e
        names = {c.uid: c.name for c in claims}
        for uid, result in answer.items():
            if uid not in names:
                raise ClaimPrepareError(
                    f"NodePrepareResources returned result for unknown claim UID {uid}"
                )
            if result.error:
                raise ClaimPrepareError(
                    f"NodePrepareResources failed for ResourceClaim {names[uid]}: {result.error}"
                )
        skipped = len(claims) - len(answer)
        if skipped:
            raise ClaimPrepareError(f"NodePrepareResources skipped {skipped} ResourceClaims")
        return answer

    def _containers(self, pod: PodSpec, claims: Sequence[PreparedClaim]) -> list[ContainerClaims]:
        by_name = {c.pod_claim: c for c in claims}
        out = []
        for container in pod.all_containers:
            if not container.claims:
                continue
            ids = []
            for use in container.claims:
                label = f"{use.name}/{use.request}" if use.request else use.name
                prepared = by_name.get(use.name)  # none for a claim that was not needed
                ids.append((label, tuple(prepared.cdi_ids(use.request)) if prepared else ()))
            out.append(ContainerClaims(container, tuple(ids)))
        return out

    def holds(self, pod: PodSpec) -> bool:
        """Whether a claim is prepared (or was sent to a driver) for ``pod``."""
        return any(pod.key in pods for _, pods in self._prepared.values())

    async def unprepare(self, pod: PodSpec) -> list[str]:
        """Unprepare the claims only this pod still uses; the errors, [] when done."""
        batches: dict[str, list[ClaimInfo]] = {}
        for uid, (claim, pods) in list(self._prepared.items()):
            if pod.key not in pods:
                continue
            if len(pods) > 1:
                pods.discard(pod.key)
                continue
            for driver in claim.claim.drivers:
                batches.setdefault(driver, []).append(claim.claim)
            del self._prepared[uid]
        errors = []
        for driver, batch in sorted(batches.items()):
            names = {c.uid: c.name for c in batch}
            try:
                answer = await self.kubelet.dra.client(driver).unprepare([c.ref for c in batch])
            except (PluginCallError, KeyError) as e:
                errors.append(f"NodeUnprepareResources ({driver}): {e}")
                continue
            errors += [
                f"NodeUnprepareResources failed for ResourceClaim {names.get(uid, uid)}: {error}"
                for uid, error in sorted(answer.items())
                if error
            ]
        return errors

    def cdi_edits(self, cdi_id: str) -> CdiEdits | None:
        return find_device(cdi_id, self.cdi_spec_dirs)


def render_claims(outcome: PodClaims, preparer: ClaimPreparer) -> str:
    """The prepared claims and, per container, its CDI devices and what their specs give."""
    pod = outcome.pod
    if not outcome.prepared:
        return f"pod {pod.key}: resource claims not prepared: {outcome.error}"
    lines = [f"pod {pod.key}: resource claims prepared"]
    for claim in outcome.claims:
        info = claim.claim
        lines.append(
            f"  claim {claim.pod_claim}: ResourceClaim {info.namespace}/{info.name} ({info.uid})"
        )
        for driver, device in claim.devices:
            requests = ", ".join(device.requests) or "all requests"
            lines.append(f"    {driver} {device.pool}/{device.device} ({requests})")
    for container in outcome.containers:
        lines.append(f"  {container.container.kind} {container.container.name}:")
        for label, ids in container.cdi_ids:
            lines.append(f"    claim {label}: CDI devices {', '.join(ids) or '(none)'}")
            for cdi_id in dict.fromkeys(ids):
                edits = preparer.cdi_edits(cdi_id)
                if edits is None:
                    lines.append(f"      {cdi_id}: no spec in {_dirs(preparer.cdi_spec_dirs)}")
                else:
                    lines.append(f"      {cdi_id}:")
                    lines += edits.lines("        ")
    return "\n".join(lines)


def _dirs(dirs: Sequence[Path]) -> str:
    return ", ".join(str(d) for d in dirs)
