"""Device-plugin mode on a real kubelet and containerd: what a pod sees from inside.

The chart's DaemonSets run the images built from this checkout; the kubelet calls their
Allocate and containerd starts the container with the answer. NVIDIA's container contract
for a simulated GPU: NVIDIA_VISIBLE_DEVICES names the allocated GPUs by UUID (NVIDIA's
k8s-device-plugin, internal/plugin/server.go, getAllocateResponse with the envvar
strategy, its default deviceListStrategy).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.node import chart, plugins
from tests.node.chart import Release
from tests.node.cluster import CDI_RUN_DIR, DEVICES, Node
from tests.node.kubelet_state import allocations
from tests.node.plugins import GENERIC_RESOURCE, GPU_RESOURCE, SIMULATED_GPUS
from tests.node.pods import (
    NAMESPACE,
    await_pod,
    pod,
    pod_log,
    seen_devices,
    seen_env,
    show_devices,
)
from tests.node.watch import watch_until

if TYPE_CHECKING:
    from lightkube import Client


@pytest.mark.parametrize("count", [1, 2], ids=["one device", "two devices"])
def test_a_generic_pod_gets_exactly_its_device_nodes(
    kube: Client, device_plugins: Release, count: int
) -> None:
    with pod(kube, "generic", show_devices(), limits={GENERIC_RESOURCE: str(count)}) as name:
        seen = seen_devices(pod_log(kube, name))
    assert len(seen) == count
    assert seen <= {str(d) for d in DEVICES}


def test_a_pod_without_a_request_sees_none_of_the_devices(
    kube: Client, device_plugins: Release
) -> None:
    with pod(kube, "plain", show_devices()) as name:
        log = pod_log(kube, name)
    assert seen_devices(log) == set()
    assert "NVIDIA_VISIBLE_DEVICES" not in seen_env(log)


@pytest.mark.parametrize("count", [1, SIMULATED_GPUS], ids=["one GPU", "every GPU"])
def test_a_gpu_pod_gets_nvidias_env_contract(
    kube: Client, device_plugins: Release, count: int
) -> None:
    with pod(kube, "gpu", show_devices(), limits={GPU_RESOURCE: str(count)}) as name:
        env = seen_env(pod_log(kube, name))
    uuids = env["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(set(uuids)) == count
    assert all(u.startswith("GPU-") for u in uuids)


# One more device than the node has, per resource.
OVER_CAPACITY = pytest.mark.parametrize(
    ("resource", "over"),
    [(GENERIC_RESOURCE, len(DEVICES) + 1), (GPU_RESOURCE, SIMULATED_GPUS + 1)],
    ids=["generic", "nvidia"],
)


@OVER_CAPACITY
def test_a_pod_over_the_nodes_capacity_stays_pending(
    kube: Client, node: Node, device_plugins: Release, resource: str, over: int
) -> None:
    def unschedulable(got: object) -> bool:
        status = getattr(got, "status", None)
        conditions = {c.type: c for c in (status.conditions or [])} if status else {}
        scheduled = conditions.get("PodScheduled")
        return scheduled is not None and scheduled.reason == "Unschedulable"

    with pod(
        kube, "over", ["sleep", "1"], limits={resource: str(over)}, wait_running=False
    ) as name:
        got = await_pod(kube, name, unschedulable)
    assert got.status.phase == "Pending"
    (scheduled,) = (c for c in got.status.conditions if c.type == "PodScheduled")
    # The scheduler's words, as kubectl describe shows them: "0/1 nodes are available:
    # 1 Insufficient nvidia.com/gpu." (pkg/scheduler/framework/plugins/noderesources/fit.go)
    assert f"Insufficient {resource}" in (scheduled.message or "")


@OVER_CAPACITY
def test_a_pod_bound_past_the_scheduler_over_capacity_is_rejected_by_the_kubelet(
    kube: Client, node: Node, device_plugins: Release, resource: str, over: int
) -> None:
    from lightkube.resources.core_v1 import Pod

    with pod(
        kube,
        "over-kubelet",
        ["sleep", "1"],
        limits={resource: str(over)},
        node_name=node.name,
        wait_running=False,
    ) as name:
        got = watch_until(
            kube,
            Pod,
            lambda got: got.status is not None and got.status.phase == "Failed",
            namespace=NAMESPACE,
            fields={"metadata.name": name},
        )
    # The device manager admits first (its Allocate is the topology manager's admit
    # handler, before the resource-fit predicate), as the kubelet's log says: "Pod admission
    # denied" reason="UnexpectedAdmissionError" message="Allocate failed due to requested
    # number of devices unavailable for <resource>. Requested: N, Available: M, which is
    # unexpected" (kubernetes pkg/kubelet/cm/devicemanager/manager.go devicesToAllocate).
    assert got.status.reason == "UnexpectedAdmissionError"
    expected = f"devices unavailable for {resource}. Requested: {over}, Available: {over - 1}"
    assert expected in got.status.message


@pytest.fixture
def cdi_strategy(kube: Client, node: Node, device_plugins: Release) -> Iterator[None]:
    """The release upgraded to the generic backend's CDI strategy (generic.cdi), then back."""
    for values in (plugins.values(node, "device-plugin", cdi={"enabled": True}), None):
        if values is None:
            yield
            values = plugins.values(node, "device-plugin")
        chart.apply(kube, device_plugins, values)
        plugins.await_release(kube, device_plugins)
        plugins.await_allocatable(kube, node, plugins.full_capacity())


def test_the_cdi_strategy_has_containerd_inject_the_device_from_our_spec(
    kube: Client, cdi_strategy: None
) -> None:
    with pod(kube, "cdi", show_devices(), limits={GENERIC_RESOURCE: "1"}) as name:
        seen = seen_devices(pod_log(kube, name))
        (allocation,) = allocations(kube, name, NAMESPACE)
    answer = allocation.answer
    # The kubelet was answered with a CDI name only, no device node: the node in the
    # container is containerd's doing, from the spec our plugin wrote.
    assert list(answer.devices) == []
    (cdi_name,) = (d.name for d in answer.cdi_devices)
    kind, device = cdi_name.split("=")
    (node_path,) = seen
    specs = [json.loads(p.read_text()) for p in CDI_RUN_DIR.glob("*.json")]
    (spec,) = (s for s in specs if s["kind"] == kind)
    (described,) = (d for d in spec["devices"] if d["name"] == device)
    assert [n["path"] for n in described["containerEdits"]["deviceNodes"]] == [node_path]
