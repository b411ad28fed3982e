"""Pod admission on the emulator, the way the kubelet's device manager admits a pod.

For each container, init containers first (container scope of the Topology
Manager):

1. The device manager's topology hints for every extended resource in
   ``resources.limits`` (:mod:`accel_plugins.kubelet.topology`), merged by the
   policy into the container's NUMA affinity; a policy that refuses the best
   hint rejects the pod (``TopologyAffinityError``).
2. Per resource, the devices (``devicesToAllocate`` in the kubelet's
   ``devicemanager/manager.go``): devices the container already holds are
   kept; otherwise the pod's reusable devices (those of its init containers)
   come first, then devices on the affinity's NUMA nodes, with
   GetPreferredAllocation (when the plugin advertises it) choosing among them
   and its answer intersected with what was offered, bogus IDs ignored; then
   the rest of the available devices. The emulator's ``allocate`` makes the
   Allocate call and writes the checkpoint.
3. Devices of a (non-sidecar) init container become reusable by the next
   containers; an app container's devices stop being reusable.

Once every container is admitted, the containers start in order and
PreStartContainer is called for each resource whose plugin sets
``pre_start_required``.

Rejections carry the kubelet's reason and message (``TopologyAffinityError``,
``UnexpectedAdmissionError: Allocate failed due to ..., which is unexpected``,
``OutOf<resource>``); a pod the API server would refuse (requests that differ
from limits) is rejected with its validation errors (reason ``Invalid``).
Where the emulator differs from the kubelet: it refuses an extended resource
no plugin registered (the kubelet lets it through, as a possible cluster-level
resource), and picks devices in sorted order where the kubelet's sets have none.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType

from accel_plugins.errors import ConfigError
from accel_plugins.kubelet.cdi import DEFAULT_SPEC_DIRS
from accel_plugins.kubelet.claims import ClaimPreparer, ClaimReader, render_claims
from accel_plugins.kubelet.emulator import Kubelet
from accel_plugins.kubelet.errors import KubeletError
from accel_plugins.kubelet.model import ContainerResponse, DeviceState
from accel_plugins.kubelet.podspec import ContainerSpec, PodSpec, load_pods
from accel_plugins.kubelet.topology import (
    MAX_NUMA_NODES,
    NONE,
    POLICIES,
    TopologyHint,
    format_nodes,
    has_topology,
    machine_numa_nodes,
    merge,
    resource_hints,
)

TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
INVALID = "Invalid"

PreferredCall = Callable[[list[str], list[str], int], Awaitable[list[str]]]
Hints = Mapping[str, tuple[TopologyHint, ...] | None]


class DeviceAllocationError(KubeletError):
    """The device manager cannot choose the devices; the message is the kubelet's."""


# -- choosing devices ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreferredAsk:
    """One GetPreferredAllocation call: what was offered and what the plugin answered."""

    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int
    answer: tuple[str, ...]

    @property
    def ignored(self) -> tuple[str, ...]:
        """Answered IDs the kubelet drops: not among those offered."""
        offered = set(self.available)
        return tuple(d for d in self.answer if d not in offered)


@dataclass(frozen=True, slots=True)
class Choice:
    """The devices for one resource of one container, and where each came from."""

    device_ids: tuple[str, ...]
    # (source, ids) in the order taken; sources: reused, preferred, aligned, unaligned, any
    steps: tuple[tuple[str, tuple[str, ...]], ...] = ()
    preferred: PreferredAsk | None = None


def filter_by_affinity(
    devices: Mapping[str, DeviceState], available: Iterable[str], hint: TopologyHint | None
) -> tuple[list[str], list[str], list[str]]:
    """filterByAffinity: available devices on the hint's nodes, on other nodes, and without
    a NUMA node; all in the third list when the resource has no topology or there is no hint."""
    ids = sorted(available)
    if hint is None or hint.affinity is None or not has_topology(devices):
        return [], [], ids
    aligned, unaligned, none = [], [], []
    for device_id in ids:
        nodes = set(devices[device_id].numa_nodes)
        if not nodes:
            none.append(device_id)
        elif nodes & hint.affinity:
            aligned.append(device_id)
        else:
            unaligned.append(device_id)
    return aligned, unaligned, none


async def devices_to_allocate(
    resource: str,
    devices: Mapping[str, DeviceState],
    in_use: Set[str],
    reusable: Set[str],
    required: int,
    hint: TopologyHint | None,
    preferred: PreferredCall | None = None,
) -> Choice:
    """The kubelet's choice of ``required`` devices for a container that holds none yet.

    ``devices`` are all the resource's devices, ``in_use`` those any container
    holds, ``reusable`` the pod's devices this container may take again,
    ``hint`` the container's NUMA affinity and ``preferred`` the plugin's
    GetPreferredAllocation (None when it does not advertise it).
    """
    if not any(d.healthy for d in devices.values()):
        raise DeviceAllocationError(
            f"no healthy devices present; cannot allocate unhealthy devices {resource}"
        )
    chosen: list[str] = []
    steps: list[tuple[str, tuple[str, ...]]] = []
    asked: PreferredAsk | None = None
    needed = required

    def take(source: str, candidates: Iterable[str]) -> bool:
        nonlocal needed
        taken = []
        for device_id in candidates:
            if needed == 0:
                break
            if device_id not in chosen:
                chosen.append(device_id)
                taken.append(device_id)
                needed -= 1
        if taken:
            steps.append((source, tuple(taken)))
        return needed == 0

    async def ask(offered: Iterable[str]) -> list[str]:
        nonlocal asked
        if preferred is None:
            return []
        available, must = sorted(set(offered)), list(chosen)
        answer = await preferred(available, must, required)
        asked = PreferredAsk(tuple(available), tuple(must), required, tuple(answer))
        return answer

    def done() -> Choice:
        return Choice(tuple(chosen), tuple(steps), asked)

    if take("reused", sorted(reusable)):
        return done()
    healthy = {i for i, d in devices.items() if d.healthy}
    available = healthy - set(in_use) - set(chosen)
    if len(available) < needed:
        raise DeviceAllocationError(
            f"requested number of devices unavailable for {resource}. "
            f"Requested: {needed}, Available: {len(available)}"
        )
    aligned, unaligned, no_numa = filter_by_affinity(devices, available, hint)
    if needed < len(aligned):
        # Enough aligned devices to choose from: the plugin chooses among them.
        answer = await ask([*aligned, *chosen])
        if take("preferred", [d for d in answer if d in set(aligned)]) or take("aligned", aligned):
            return done()
    else:
        # Every aligned device first (the alignment the Topology Manager promised), then
        # the plugin chooses the rest among all available devices.
        if take("aligned", aligned):
            return done()
        answer = await ask([*available, *chosen])
        if take("preferred", [d for d in answer if d in available]):
            return done()
        if take("unaligned", unaligned) or take("any", no_numa):
            return done()
    raise DeviceAllocationError(
        "unexpectedly allocated less resources than required. "
        f"Requested: {required}, Got: {required - needed}"
    )


# -- admission results ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    """What one container got of one resource."""

    resource: str
    device_ids: tuple[str, ...]
    response: ContainerResponse
    choice: Choice | None = None  # None: the container already held them (no Allocate call)

    def to_dict(self) -> dict[str, object]:
        choice = self.choice
        asked = choice.preferred if choice is not None else None
        return {
            "resource": self.resource,
            "device_ids": list(self.device_ids),
            "already_held": choice is None,
            "steps": [[s, list(ids)] for s, ids in choice.steps] if choice else [],
            "preferred_allocation": None
            if asked is None
            else {
                "available": list(asked.available),
                "must_include": list(asked.must_include),
                "size": asked.size,
                "answer": list(asked.answer),
            },
            "response": self.response.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class PreStart:
    """One PreStartContainer call at container start; ``error`` None when it succeeded."""

    resource: str
    device_ids: tuple[str, ...]
    error: str | None = None


def _no_hints() -> Hints:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ContainerAdmission:
    """One container: its hints, NUMA affinity, devices and (once started) PreStartContainer."""

    container: ContainerSpec
    hints: Hints = field(default_factory=_no_hints, hash=False)
    affinity: TopologyHint | None = None  # None: no hints computed (policy none)
    grants: tuple[Grant, ...] = ()
    pre_starts: tuple[PreStart, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.container.name,
            "kind": self.container.kind,
            "hints": {
                r: None if h is None else [x.to_dict() for x in h] for r, h in self.hints.items()
            },
            "affinity": None if self.affinity is None else self.affinity.to_dict(),
            "grants": [g.to_dict() for g in self.grants],
            "pre_start": [
                {"resource": p.resource, "device_ids": list(p.device_ids), "error": p.error}
                for p in self.pre_starts
            ],
        }


@dataclass(frozen=True, slots=True)
class Admission:
    """The outcome for one pod; ``reason`` is empty when it was admitted."""

    pod: PodSpec
    policy: str
    numa_nodes: tuple[int, ...]
    containers: tuple[ContainerAdmission, ...] = ()
    reason: str = ""
    message: str = ""

    @property
    def admitted(self) -> bool:
        return not self.reason

    @property
    def started(self) -> bool:
        """Admitted, and every PreStartContainer call succeeded."""
        return self.admitted and all(p.error is None for c in self.containers for p in c.pre_starts)

    def to_dict(self) -> dict[str, object]:
        return {
            "pod": self.pod.key,
            "admitted": self.admitted,
            "started": self.started,
            "reason": self.reason,
            "message": self.message,
            "policy": self.policy,
            "numa_nodes": list(self.numa_nodes),
            "containers": [c.to_dict() for c in self.containers],
        }


class _RejectedError(Exception):
    def __init__(self, reason: str, message: str, container: ContainerAdmission | None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.container = container


def _unexpected(error: KubeletError, container: ContainerAdmission) -> _RejectedError:
    # admission.GetPodAdmitResult wraps any error of the device manager so.
    return _RejectedError(
        UNEXPECTED_ADMISSION_ERROR,
        f"Allocate failed due to {error}, which is unexpected",
        container,
    )


# -- the admitter --------------------------------------------------------------------------


class PodAdmitter:
    """Admits pods on a running emulator, one at a time, as the kubelet does.

    ``numa_nodes`` are the machine's NUMA nodes; by default the host's (from
    sysfs) plus every node a registered device reports, so a simulated
    node's topology counts.
    """

    def __init__(
        self,
        kubelet: Kubelet,
        *,
        policy: str = NONE,
        numa_nodes: Sequence[int] | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown topology policy {policy!r}; choose one of {POLICIES}")
        self.kubelet = kubelet
        self.policy = policy
        self._numa_nodes = tuple(sorted(set(numa_nodes))) if numa_nodes is not None else None
        self._host_nodes: list[int] | None = None
        self._lock = asyncio.Lock()

    def numa_nodes(self) -> tuple[int, ...]:
        if self._numa_nodes is not None:
            return self._numa_nodes
        if self._host_nodes is None:
            self._host_nodes = machine_numa_nodes()
        nodes = set(self._host_nodes)
        for view in self.kubelet.resources.values():
            for device in view.devices.values():
                nodes.update(device.numa_nodes)
        return tuple(sorted(nodes))

    async def admit(self, pod: PodSpec) -> Admission:
        """Admit ``pod`` and start its containers; never raises for a rejection."""
        async with self._lock:
            return await self._admit(pod)

    async def _admit(self, pod: PodSpec) -> Admission:
        numa = self.numa_nodes()
        outcome = Admission(pod, self.policy, numa)
        problems = pod.invalid()
        if problems:
            listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            return replace(
                outcome, reason=INVALID, message=f'The Pod "{pod.name}" is invalid: {listed}'
            )
        resources = self.kubelet.resources
        for resource, requested in pod.device_request().items():
            if resource not in resources:
                return replace(
                    outcome,
                    reason=f"OutOf{resource}",
                    message=f"Pod was rejected: Node didn't have enough resource: {resource}, "
                    f"requested: {requested}, used: 0, capacity: 0",
                )
        if self.policy != NONE and len(numa) > MAX_NUMA_NODES:
            raise KubeletError(
                f"the Topology Manager supports at most {MAX_NUMA_NODES} NUMA nodes, "
                f"this machine has {len(numa)} ({format_nodes(numa)})"
            )
        admitted: list[ContainerAdmission] = []
        reusable: dict[str, set[str]] = {}
        for container in pod.all_containers:
            try:
                result = await self._admit_container(pod, container, numa, reusable)
            except _RejectedError as rejected:
                # The pod is not active: the kubelet frees what it was given.
                self.kubelet.release(pod.name, namespace=pod.namespace)
                if rejected.container is not None:
                    admitted.append(rejected.container)
                return replace(
                    outcome,
                    containers=tuple(admitted),
                    reason=rejected.reason,
                    message=f"Pod was rejected: {rejected.message}",
                )
            admitted.append(result)
            for grant in result.grants:
                ids = reusable.setdefault(grant.resource, set())
                if container.init and not container.restartable:
                    ids.update(grant.device_ids)
                else:
                    ids.difference_update(grant.device_ids)
        started = await self._start(pod, admitted)
        return replace(outcome, containers=tuple(started))

    async def _admit_container(
        self,
        pod: PodSpec,
        container: ContainerSpec,
        numa: Sequence[int],
        reusable: Mapping[str, set[str]],
    ) -> ContainerAdmission:
        resources = self.kubelet.resources
        allocations = self.kubelet.allocations

        def in_use(resource: str) -> set[str]:
            return {d for r in allocations if r.resource == resource for d in r.device_ids}

        def held(resource: str) -> tuple[str, ...]:
            for r in allocations:
                if r.key == (pod.namespace, pod.name, container.name, resource):
                    return r.device_ids
            return ()

        result = ContainerAdmission(container)
        if self.policy != NONE:
            hints: dict[str, tuple[TopologyHint, ...] | None] = {}
            for resource, count in container.devices.items():
                view = resources[resource]
                found = resource_hints(
                    view.devices,
                    numa,
                    count,
                    available=set(view.healthy) - in_use(resource),
                    reusable=reusable.get(resource, set()),
                    allocated=held(resource),
                )
                hints[resource] = None if found is None else tuple(found)
            affinity, admit = merge(
                self.policy, numa, {r: None if h is None else list(h) for r, h in hints.items()}
            )
            result = replace(result, hints=MappingProxyType(hints), affinity=affinity)
            if not admit:
                raise _RejectedError(
                    TOPOLOGY_AFFINITY_ERROR,
                    "Resources cannot be allocated with Topology locality",
                    result,
                )
        grants: list[Grant] = []
        for resource, count in container.devices.items():
            try:
                grants.append(await self._grant(pod, container, resource, count, result, reusable))
            except KubeletError as e:
                raise _unexpected(e, replace(result, grants=tuple(grants))) from None
        return replace(result, grants=tuple(grants))

    async def _grant(
        self,
        pod: PodSpec,
        container: ContainerSpec,
        resource: str,
        count: int,
        result: ContainerAdmission,
        reusable: Mapping[str, set[str]],
    ) -> Grant:
        view = self.kubelet.resources[resource]
        existing = next(
            (
                r
                for r in self.kubelet.allocations
                if r.key == (pod.namespace, pod.name, container.name, resource)
            ),
            None,
        )
        if existing is not None:
            if len(existing.device_ids) != count:
                raise DeviceAllocationError(
                    f'pod "{pod.key}" container "{container.name}" changed request for '
                    f'resource "{resource}" from {len(existing.device_ids)} to {count}'
                )
            if not set(existing.device_ids) <= set(view.healthy):
                raise DeviceAllocationError(
                    "previously allocated devices are no longer healthy; "
                    f"cannot allocate unhealthy devices {resource}"
                )
            return Grant(resource, existing.device_ids, existing.response)
        in_use = {
            d for r in self.kubelet.allocations if r.resource == resource for d in r.device_ids
        }
        preferred: PreferredCall | None = None
        if view.options.get_preferred_allocation_available:
            preferred = self.kubelet.client(resource).preferred
        choice = await devices_to_allocate(
            resource,
            view.devices,
            in_use,
            reusable.get(resource, set()),
            count,
            result.affinity,
            preferred,
        )
        record = await self.kubelet.allocate(
            pod.name,
            container.name,
            resource,
            len(choice.device_ids),
            namespace=pod.namespace,
            must_include=choice.device_ids,
            pre_start=False,
        )
        return Grant(resource, record.device_ids, record.response, choice)

    async def _start(
        self, pod: PodSpec, containers: list[ContainerAdmission]
    ) -> list[ContainerAdmission]:
        """Start the containers in order: PreStartContainer where the plugin requires it.
        A failure leaves the later containers unstarted (the kubelet would retry)."""
        started = []
        failed = False
        for admitted in containers:
            calls = []
            for grant in admitted.grants if not failed else ():
                view = self.kubelet.resources.get(grant.resource)
                if view is None or not view.options.pre_start_required:
                    continue
                error = None
                try:
                    await self.kubelet.client(grant.resource).pre_start(list(grant.device_ids))
                except KubeletError as e:
                    error = f"device plugin PreStartContainer rpc failed with err: {e}"
                    failed = True
                calls.append(PreStart(grant.resource, grant.device_ids, error))
            started.append(replace(admitted, pre_starts=tuple(calls)))
        return started


# -- rendering -----------------------------------------------------------------------------


def _hints_text(hints: tuple[TopologyHint, ...] | None) -> str:
    if hints is None:
        return "no preference (its devices report no NUMA node)"
    if not hints:
        return "none possible"
    return ", ".join(
        format_nodes(h.affinity) + (" (preferred)" if h.preferred else "") for h in hints
    )


def _items(title: str, items: Sequence[str], indent: str) -> list[str]:
    if not items:
        return []
    return [f"{indent}{title}:"] + [f"{indent}  {item}" for item in items]


def response_lines(response: ContainerResponse, indent: str) -> list[str]:
    """What the runtime sets up for the container, the empty parts left out."""
    specs = [
        f"{d.host_path} -> {d.container_path} ({d.permissions or 'no permissions'})"
        for d in response.devices
    ]
    mounts = [
        f"{m.host_path} -> {m.container_path}{' (read-only)' if m.read_only else ''}"
        for m in response.mounts
    ]
    lines = [
        *_items("device specs", specs, indent),
        *_items("mounts", mounts, indent),
        *_items("envs", [f"{k}={v}" for k, v in sorted(response.envs.items())], indent),
        *_items(
            "annotations", [f"{k}={v}" for k, v in sorted(response.annotations.items())], indent
        ),
        *_items("CDI devices", list(response.cdi_devices), indent),
    ]
    return lines or [f"{indent}(empty response)"]


_SOURCES = {
    "reused": "reused from the init containers",
    "preferred": "preferred by the plugin",
    "aligned": "on the affinity's NUMA nodes",
    "unaligned": "off the affinity's NUMA nodes",
    "any": "the kubelet's pick",
}


def _grant_lines(grant: Grant) -> list[str]:
    lines = [f"    {grant.resource}: {', '.join(grant.device_ids)}"]
    choice = grant.choice
    if choice is None:
        lines.append("      already held by the container (no Allocate call)")
    else:
        lines += [f"      {', '.join(ids)}: {_SOURCES[s]}" for s, ids in choice.steps]
        asked = choice.preferred
        if asked is not None:
            must = ", ".join(asked.must_include) or "-"
            lines.append(
                f"      GetPreferredAllocation(available {', '.join(asked.available)}; "
                f"must include {must}; size {asked.size}) -> {', '.join(asked.answer) or '-'}"
            )
            if asked.ignored:
                lines.append(f"      ignored, not offered: {', '.join(asked.ignored)}")
    return lines + response_lines(grant.response, "      ")


def render_admission(outcome: Admission) -> str:
    """The outcome for a terminal: per container the NUMA affinity, devices and response."""
    pod = outcome.pod
    where = f"topology policy {outcome.policy}, NUMA nodes {format_nodes(outcome.numa_nodes)}"
    if outcome.admitted:
        head = f"pod {pod.key}: admitted ({where})"
    else:
        head = f"pod {pod.key}: rejected: {outcome.reason}: {outcome.message} ({where})"
    lines = [head]
    for admitted in outcome.containers:
        lines.append(f"  {admitted.container.kind} {admitted.container.name}:")
        for resource, hints in admitted.hints.items():
            lines.append(f"    topology hints for {resource}: {_hints_text(hints)}")
        if admitted.affinity is not None:
            lines.append(f"    NUMA affinity: {admitted.affinity}")
        if not admitted.grants and not admitted.container.devices:
            lines.append("    no extended resources")
        for grant in admitted.grants:
            lines += _grant_lines(grant)
        for call in admitted.pre_starts:
            state = "ok" if call.error is None else f"failed: {call.error}"
            lines.append(
                f"    PreStartContainer {call.resource} ({', '.join(call.device_ids)}): {state}"
            )
    return "\n".join(lines)


# -- the command ---------------------------------------------------------------------------


async def wait_for_resources(
    kubelet: Kubelet, resources: Iterable[str], timeout: float
) -> list[str]:
    """Wait until every resource is registered, connected and has sent its device list;
    return those still missing when ``timeout`` ran out."""
    wanted = sorted(set(resources))

    def missing(k: Kubelet) -> list[str]:
        views = k.resources
        return [
            r for r in wanted if r not in views or not views[r].connected or views[r].updates < 1
        ]

    with contextlib.suppress(TimeoutError):
        await kubelet.wait_for(lambda k: not missing(k), timeout, what="the pods' resources")
    return missing(kubelet)


async def admit_pods(
    kubelet: Kubelet,
    pods: Sequence[PodSpec],
    *,
    policy: str = NONE,
    numa_nodes: Sequence[int] | None = None,
    timeout: float = 30.0,
    echo: Callable[[str], None] = print,
    claims: ClaimPreparer | None = None,
) -> int:
    """On a running emulator: wait for the pods' resources, admit each pod and ``echo`` the
    outcome; 0 when every pod was admitted and started, 1 otherwise.

    ``claims`` prepares the resource claims of each admitted pod that has any.

    Pods in the checkpoint that are not among ``pods`` are released first: as for the
    kubelet, only active pods hold devices.
    """
    resources = sorted({r for pod in pods for r in pod.resources})
    missing = await wait_for_resources(kubelet, resources, timeout)
    if missing:
        echo(f"timed out after {timeout:g}s waiting for {', '.join(missing)} to register")
    active = {(pod.namespace, pod.name) for pod in pods}
    for namespace, name in sorted({(r.namespace, r.pod) for r in kubelet.allocations} - active):
        kubelet.release(name, namespace=namespace)
    admitter = PodAdmitter(kubelet, policy=policy, numa_nodes=numa_nodes)
    ok = True
    for pod in pods:
        outcome = await admitter.admit(pod)
        echo(render_admission(outcome))
        ok = ok and outcome.started
        if outcome.admitted and pod.resource_claims and claims is not None:
            # The kubelet prepares a pod's claims after admission, before its containers.
            prepared = await claims.prepare(pod)
            echo(render_claims(prepared, claims))
            ok = ok and prepared.prepared
    if kubelet.allocations:
        echo(f"checkpoint: {kubelet.checkpoint_path} ({len(kubelet.allocations)} allocations)")
    return 0 if ok else 1


def parse_numa_nodes(text: str) -> list[int]:
    """``0,1`` or ``0-3`` (or both: ``0-1,4``) as a sorted list; ValueError when malformed."""
    nodes: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise ValueError(f"{text!r} is not a list of NUMA nodes (e.g. 0,1 or 0-3)") from None
        if low < 0 or high < low:
            raise ValueError(f"{part.strip()!r}: NUMA nodes are numbers from 0 up")
        nodes.update(range(low, high + 1))
    return sorted(nodes)


def admitting(
    paths: Sequence[Path],
    *,
    policy: str = NONE,
    numa_nodes: str | None = None,
    timeout: float = 30.0,
    once: bool = False,
    echo: Callable[[str], None] = print,
    kubeconfig: str | None = None,
    cdi_spec_dirs: Sequence[Path] = DEFAULT_SPEC_DIRS,
) -> Callable[[Kubelet], Awaitable[int | None]]:
    """``accel-plugins kubelet --admit``: read the pod manifests now (ConfigError naming file,
    field and reason), and return what the running emulator does with them (its ``then``):
    admit them, then stop with the exit status when ``once``, else keep serving.

    Pods with resource claims need an API server: ``kubeconfig`` (else ``$KUBECONFIG``) is
    read now too. Their claims are unprepared at the end of ``once``, or when the emulator
    stops (its pods go with it).
    """
    nodes: list[int] | None = None
    if numa_nodes is not None:
        try:
            nodes = parse_numa_nodes(numa_nodes)
        except ValueError as e:
            raise ConfigError("--numa-nodes", "", str(e)) from None
        if policy != NONE and len(nodes) > MAX_NUMA_NODES:
            raise ConfigError(
                "--numa-nodes",
                "",
                f"the Topology Manager supports at most {MAX_NUMA_NODES} NUMA nodes",
            )
    if policy not in POLICIES:
        raise ConfigError("--topology-policy", "", f"choose one of {', '.join(POLICIES)}")
    pods: list[PodSpec] = []
    seen: dict[str, str] = {}
    for path in paths:
        for pod in load_pods(path):
            if pod.key in seen:
                raise ConfigError(
                    pod.source, "metadata.name", f"pod {pod.key} is also in {seen[pod.key]}"
                )
            seen[pod.key] = pod.source
            pods.append(pod)

    claimed = [pod for pod in pods if pod.resource_claims]
    make_reader = _claim_reader(claimed, kubeconfig) if claimed else None

    async def then(kubelet: Kubelet) -> int | None:
        if make_reader is None:
            code = await admit_pods(
                kubelet, pods, policy=policy, numa_nodes=nodes, timeout=timeout, echo=echo
            )
            return code if once else None
        reader = make_reader()
        preparer = ClaimPreparer(
            kubelet, reader, cdi_spec_dirs=cdi_spec_dirs, driver_timeout=timeout
        )
        try:
            code = await admit_pods(
                kubelet,
                pods,
                policy=policy,
                numa_nodes=nodes,
                timeout=timeout,
                echo=echo,
                claims=preparer,
            )
            if not once:
                await asyncio.Future()  # the pods run until the emulator stops
        finally:
            failed = await _unprepare(preparer, claimed, echo)
            await reader.close()
        return code or failed

    return then


async def _unprepare(
    preparer: ClaimPreparer, pods: Sequence[PodSpec], echo: Callable[[str], None]
) -> int:
    failed = 0
    for pod in pods:
        if not preparer.holds(pod):
            continue  # nothing prepared for it (rejected, or its claims failed their checks)
        errors = await preparer.unprepare(pod)
        for error in errors:
            echo(f"pod {pod.key}: unprepare dynamic resources: {error}")
        failed = failed or (1 if errors else 0)
        if not errors:
            echo(f"pod {pod.key}: resource claims unprepared")
    return failed


def _claim_reader(pods: Sequence[PodSpec], kubeconfig: str | None) -> Callable[[], ClaimReader]:
    """How to read the pods' claims from the API server; ConfigError (exit 2) without one.

    lightkube (the ``[dra]`` extra) is imported here, only for pods with claims.
    """
    path = kubeconfig or os.environ.get("KUBECONFIG") or ""
    names = ", ".join(pod.key for pod in pods)
    if not path:
        raise ConfigError(
            "--kubeconfig",
            "",
            f"pod {names} has resource claims: the emulator reads them from an API server; "
            "give --kubeconfig or set KUBECONFIG",
        )
    try:
        from accel_plugins.kubelet.claim_api import reader_factory
    except ImportError as e:
        raise ConfigError(
            "--kubeconfig", "", f"resource claims need the [dra] extra (lightkube): {e}"
        ) from None
    return reader_factory(path)
