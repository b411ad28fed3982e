"""The real kube-scheduler allocates a claim from our ResourceSlices and binds the pod.

Issue 19's "done when": a DeviceClass with a CEL selector on our attributes,
a ResourceClaim and a pod, allocated by the real scheduler from the slices our
plugin process publishes, then prepared by that plugin when the kubelet
emulator admits the pod, for both backends. Needs ``kube-scheduler`` beside
the API server in ``$KUBEBUILDER_ASSETS`` (accel_plugins/conformance/envtest.py starts it there);
skips, saying so, without it (../shared/k8s ships one, v1.34.9; where it is missing,
hack/build-kube-scheduler builds one from the same tree as its kube-apiserver).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, NodeStatus, Pod, ServiceAccount
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim
from lightkube.types import PatchType

from accel_plugins.conformance.envtest import ApiServer, scheduler_missing
from accel_plugins.testing import short_tempdir
from tests.e2e.test_kubelet_admit_claims import (
    BACKENDS,
    TIMEOUT,
    BackendCase,
    admit_once,
    allocated_claim,
    check_prepared,
    device_class,
    dra_plugin,
    kubeconfigs,
    pod_document,
    pod_manifest,
    published,
    readable_by_node,
    selected_device,
)
from tests.fixtures.dra_kube import NodeClient

pytestmark = pytest.mark.timeout(120)


async def schedulable(kube: AsyncClient, node: str) -> None:
    """What a kubelet reports and the scheduler's filters read: room for pods, Ready."""
    room = {"pods": "10", "cpu": "8", "memory": "16Gi"}
    status = {
        "status": {
            "capacity": room,
            "allocatable": room,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        }
    }
    await kube.patch(NodeStatus, node, status, patch_type=PatchType.MERGE)
    # TaintNodesByCondition (an admission plugin on by default) creates every Node with
    # node.kubernetes.io/not-ready:NoSchedule; the node lifecycle controller would lift it
    # once Ready, and none runs here.
    await kube.patch(Node, node, {"spec": {"taints": None}}, patch_type=PatchType.MERGE)


async def bound_to(kube: AsyncClient, namespace: str, pod: str) -> str:
    """The node the scheduler binds ``pod`` to, as the watch delivers it."""
    async for _, item in kube.watch(Pod, namespace=namespace, fields={"metadata.name": pod}):
        if item.spec is not None and item.spec.nodeName:
            return item.spec.nodeName
    raise AssertionError("the watch ended")


@pytest.mark.parametrize("case", BACKENDS)
async def test_the_scheduler_allocates_from_our_slices_and_the_plugin_prepares(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    node_client: NodeClient,
    kube_namespace: str,
    tmp_path: Path,
    case: BackendCase,
) -> None:
    namespace = kube_namespace
    if not kube_apiserver.scheduler:
        pytest.skip(f"no kube-scheduler: {scheduler_missing()}")
    admin, as_node = kubeconfigs(tmp_path, kube_apiserver, kube_node)
    await schedulable(kube, kube_node)
    selecting = await device_class(kube, case.selector)
    try:
        with short_tempdir("sched-") as root:
            async with dra_plugin(case, tmp_path, root, kube_node, as_node):
                found = await asyncio.wait_for(published(kube, kube_node, case.driver), TIMEOUT)
                wanted = selected_device(found, case)
                claim, uid = await allocated_claim(
                    kube, namespace, selecting, kube_node, None, case.driver
                )
                await kube.create(
                    ServiceAccount(metadata=ObjectMeta(name="default", namespace=namespace))
                )
                await kube.create(cast(Pod, Pod.from_dict(pod_document(namespace, claim))))

                # The scheduler: allocation from our slice by the class's CEL, then binding.
                node = await asyncio.wait_for(bound_to(kube, namespace, "trainer"), TIMEOUT)
                assert node == kube_node
                allocated = await kube.get(ResourceClaim, claim, namespace=namespace)
                assert allocated.status is not None
                assert allocated.status.allocation is not None
                assert allocated.status.allocation.devices is not None
                results = allocated.status.allocation.devices.results or []
                assert [(r.driver, r.pool, r.device) for r in results] == [
                    (case.driver, kube_node, wanted)
                ]
                assert [r.name for r in allocated.status.reservedFor or []] == ["trainer"]

                await asyncio.wait_for(
                    readable_by_node(node_client(kube_node), namespace, claim), TIMEOUT
                )
                pod = pod_manifest(tmp_path / "pod.yaml", namespace, claim)
                output = await admit_once(root, admin, pod)
                check_prepared(output, case, f"{namespace}/trainer", kube_node, wanted, uid)
                assert not (root / "cdi" / f"k8s.{case.driver}_claim_{uid}.json").exists()
    finally:
        await kube.delete(DeviceClass, selecting)
