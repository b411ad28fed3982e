"""The emulator's pod admitter, the way the kubelet's device manager admits a pod.

For each container, init containers first (container scope of the Topology
Manager):

1. The device manager's topology hints for every extended resource in
   ``resources.limits`` (:mod:`accel_plugins.kubelet_emulator.topology`), merged by the
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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from accel_plugins.kubelet_emulator.admission_outcome import (
    Admission,
    ContainerAdmission,
    Grant,
    PreStart,
)
from accel_plugins.kubelet_emulator.device_choice import (
    DeviceAllocationError,
    PreferredCall,
    devices_to_allocate,
)
from accel_plugins.kubelet_emulator.emulator import Kubelet
from accel_plugins.kubelet_emulator.errors import KubeletError
from accel_plugins.kubelet_emulator.podspec import ContainerSpec, PodSpec
from accel_plugins.kubelet_emulator.topology import (
    MAX_NUMA_NODES,
    NONE,
    POLICIES,
    TopologyHint,
    format_nodes,
    machine_numa_nodes,
    merge,
    resource_hints,
)

TOPOLOGY_AFFINITY_ERROR = "TopologyAffinityError"
UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
INVALID = "Invalid"


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
