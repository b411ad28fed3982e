"""Device-plugin mode on a real kubelet and containerd: what a pod sees from inside.

The chart's DaemonSets run the images built from this checkout; the kubelet calls their
Allocate and containerd starts the container with the answer. NVIDIA's container contract
for a simulated GPU: NVIDIA_VISIBLE_DEVICES names the allocated GPUs by UUID (NVIDIA's
k8s-device-plugin, internal/plugin/server.go, getAllocateResponse with the envvar
strategy, its default deviceListStrategy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.node.chart import Release
from tests.node.cluster import DEVICES, Node
from tests.node.plugins import GENERIC_RESOURCE, GPU_RESOURCE, SIMULATED_GPUS
from tests.node.pods import await_pod, pod, pod_log, seen_devices, seen_env, show_devices

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


@pytest.mark.parametrize(
    ("resource", "over"),
    [(GENERIC_RESOURCE, len(DEVICES) + 1), (GPU_RESOURCE, SIMULATED_GPUS + 1)],
    ids=["generic", "nvidia"],
)
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
