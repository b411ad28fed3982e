"""The PodResources v1 service of the emulator, queried over its real socket."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from accel_plugins.api import podresources_v1_pb2 as pr
from accel_plugins.api import podresources_v1_pb2_grpc as pr_grpc
from accel_plugins.kubelet_emulator import DeviceState, Kubelet
from accel_plugins.kubelet_emulator.client import unix_target
from tests.fixtures.kubelet import MakePlugin, register

WIDGET = "example.com/widget"
GADGET = "example.com/gadget"


@pytest.fixture
async def lister(kubelet: Kubelet) -> AsyncIterator[pr_grpc.PodResourcesListerAsyncStub]:
    assert kubelet.pod_resources_socket is not None
    async with grpc.aio.insecure_channel(unix_target(kubelet.pod_resources_socket)) as channel:
        yield pr_grpc.PodResourcesListerStub(channel)


@pytest.fixture
async def populated(kubelet: Kubelet, make_plugin: MakePlugin) -> Kubelet:
    """Widgets on NUMA 0 and 1 (w3 unhealthy), a gadget without topology, two pods."""
    widget = await make_plugin(
        [
            DeviceState("w0", numa_nodes=(0,)),
            DeviceState("w1", numa_nodes=(0,)),
            DeviceState("w2", numa_nodes=(1,)),
            DeviceState("w3", "Unhealthy", numa_nodes=(1,)),
        ],
        name="widget",
    )
    gadget = await make_plugin([DeviceState("g0")], name="gadget")
    await register(kubelet, widget, WIDGET)
    await register(kubelet, gadget, GADGET)
    await kubelet.allocate("trainer", "main", WIDGET, 3, namespace="ml")
    await kubelet.allocate("trainer", "sidecar", GADGET, 1, namespace="ml")
    return kubelet


def devices(resource: str, ids: list[str], numa: int | None = None) -> pr.ContainerDevices:
    group = pr.ContainerDevices(resource_name=resource, device_ids=ids)
    if numa is not None:
        group.topology.nodes.append(pr.NUMANode(ID=numa))
    return group


async def test_list_reports_pods_containers_and_numa_groups(
    populated: Kubelet, lister: pr_grpc.PodResourcesListerAsyncStub
) -> None:
    response = await lister.List(pr.ListPodResourcesRequest())

    assert response == pr.ListPodResourcesResponse(
        pod_resources=[
            pr.PodResources(
                name="trainer",
                namespace="ml",
                containers=[
                    pr.ContainerResources(
                        name="main",
                        # One group per NUMA placement, as the kubelet reports them.
                        devices=[devices(WIDGET, ["w0", "w1"], 0), devices(WIDGET, ["w2"], 1)],
                    ),
                    pr.ContainerResources(name="sidecar", devices=[devices(GADGET, ["g0"])]),
                ],
            )
        ]
    )


async def test_list_is_empty_without_allocations(
    kubelet: Kubelet, lister: pr_grpc.PodResourcesListerAsyncStub
) -> None:
    response = await lister.List(pr.ListPodResourcesRequest())

    assert list(response.pod_resources) == []


async def test_allocatable_lists_every_healthy_device(
    populated: Kubelet, lister: pr_grpc.PodResourcesListerAsyncStub
) -> None:
    response = await lister.GetAllocatableResources(pr.AllocatableResourcesRequest())

    by_resource: dict[str, list[str]] = {}
    for group in response.devices:
        by_resource.setdefault(group.resource_name, []).extend(group.device_ids)
    # Allocated devices are still allocatable node resources; unhealthy w3 is not.
    assert by_resource == {GADGET: ["g0"], WIDGET: ["w0", "w1", "w2"]}


async def test_get_returns_one_pod(
    populated: Kubelet, lister: pr_grpc.PodResourcesListerAsyncStub
) -> None:
    response = await lister.Get(pr.GetPodResourcesRequest(pod_name="trainer", pod_namespace="ml"))

    assert response.pod_resources.name == "trainer"
    assert [c.name for c in response.pod_resources.containers] == ["main", "sidecar"]


@pytest.mark.parametrize(
    ("pod", "namespace"),
    [
        pytest.param("nobody", "ml", id="unknown-pod"),
        pytest.param("trainer", "default", id="wrong-namespace"),
    ],
)
async def test_get_unknown_pod_is_not_found(
    populated: Kubelet, lister: pr_grpc.PodResourcesListerAsyncStub, pod: str, namespace: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await lister.Get(pr.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace))

    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert pod in (caught.value.details() or "")


async def test_released_pod_disappears(
    populated: Kubelet, lister: pr_grpc.PodResourcesListerAsyncStub
) -> None:
    populated.release("trainer", namespace="ml")

    response = await lister.List(pr.ListPodResourcesRequest())

    assert list(response.pod_resources) == []
