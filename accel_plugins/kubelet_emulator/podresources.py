"""The PodResources v1 service: which devices each container holds, and what is allocatable.

Devices are grouped per resource and per NUMA placement, each group carrying
the topology the plugin last reported in ListAndWatch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import grpc

from accel_plugins.api import podresources_v1_pb2 as pr
from accel_plugins.api import podresources_v1_pb2_grpc as pr_grpc
from accel_plugins.kubelet_emulator.allocation import AllocationRecord
from accel_plugins.kubelet_emulator.state import ResourceView


class PodResourcesSource(Protocol):
    """What the service reads: the emulator satisfies it."""

    @property
    def allocations(self) -> list[AllocationRecord]: ...

    @property
    def resources(self) -> Mapping[str, ResourceView]: ...


def container_devices(
    resource: str, device_ids: Iterable[str], view: ResourceView | None
) -> list[pr.ContainerDevices]:
    """One ContainerDevices per NUMA placement, in order of first appearance."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for device_id in device_ids:
        device = view.devices.get(device_id) if view is not None else None
        nodes = device.numa_nodes if device is not None else ()
        groups.setdefault(nodes, []).append(device_id)
    result = []
    for nodes, ids in groups.items():
        entry = pr.ContainerDevices(resource_name=resource, device_ids=ids)
        if nodes:
            entry.topology.nodes.extend(pr.NUMANode(ID=n) for n in nodes)
        result.append(entry)
    return result


def pod_resources(source: PodResourcesSource, namespace: str, pod: str) -> pr.PodResources | None:
    records = [r for r in source.allocations if (r.namespace, r.pod) == (namespace, pod)]
    if not records:
        return None
    resources = source.resources
    containers: dict[str, pr.ContainerResources] = {}
    for record in records:
        container = containers.setdefault(
            record.container, pr.ContainerResources(name=record.container)
        )
        container.devices.extend(
            container_devices(record.resource, record.device_ids, resources.get(record.resource))
        )
    return pr.PodResources(name=pod, namespace=namespace, containers=list(containers.values()))


class PodResourcesServicer(pr_grpc.PodResourcesListerServicer):
    """Serves List, Get and GetAllocatableResources from the emulator's state."""

    def __init__(self, source: PodResourcesSource) -> None:
        self._source = source

    async def List(
        self,
        request: pr.ListPodResourcesRequest,
        context: grpc.aio.ServicerContext[pr.ListPodResourcesRequest, pr.ListPodResourcesResponse],
    ) -> pr.ListPodResourcesResponse:
        pods = dict.fromkeys((r.namespace, r.pod) for r in self._source.allocations)
        found = (pod_resources(self._source, ns, name) for ns, name in pods)
        return pr.ListPodResourcesResponse(pod_resources=[p for p in found if p is not None])

    async def GetAllocatableResources(
        self,
        request: pr.AllocatableResourcesRequest,
        context: grpc.aio.ServicerContext[
            pr.AllocatableResourcesRequest, pr.AllocatableResourcesResponse
        ],
    ) -> pr.AllocatableResourcesResponse:
        devices = []
        for name, view in sorted(self._source.resources.items()):
            devices.extend(container_devices(name, view.healthy, view))
        return pr.AllocatableResourcesResponse(devices=devices)

    async def Get(
        self,
        request: pr.GetPodResourcesRequest,
        context: grpc.aio.ServicerContext[pr.GetPodResourcesRequest, pr.GetPodResourcesResponse],
    ) -> pr.GetPodResourcesResponse:
        found = pod_resources(self._source, request.pod_namespace, request.pod_name)
        if found is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {request.pod_name!r} in namespace {request.pod_namespace!r} not found",
            )
        return pr.GetPodResourcesResponse(pod_resources=found)
