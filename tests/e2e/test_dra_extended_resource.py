"""Pods unchanged: a pod asking for ``nvidia.com/gpu: 1`` is served by our DRA driver.

KEP-5004 (extended resources backed by DRA; alpha in 1.34 behind ``DRAExtendedResource``,
on here for the API server and the scheduler). Facts from kubernetes/kubernetes:

- ``DeviceClassSpec.ExtendedResourceName`` (staging/src/k8s.io/api/resource/v1/types.go)
  maps a pod's extended resource to a class when no node's allocatable has it.
- The scheduler's DynamicResources plugin (pkg/scheduler/framework/plugins/dynamicresources)
  allocates a claim for it and, at binding, creates it with ``generateName:
  <pod>-extended-resources-``, the annotation ``resource.kubernetes.io/extended-resource-claim:
  "true"`` (``ExtendedResourceClaimAnnotation`` in the same types.go) and the pod as owner, and
  records it in ``pod.status.extendedResourceClaimStatus``.
- The kubelet prepares that claim through the driver's NodePrepareResources, as any other.

Here the DeviceClass is the chart's own (``dra.extendedResources``), the slices come from our
NVIDIA backend on a simulated node, the real kube-scheduler binds the pod and creates the
claim, and the kubelet's call is made with the emulator's DRA client on the driver's socket.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import codecs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, ServiceAccount
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim

from accel_plugins.kubelet_emulator.dra import DraClaim, DraClient
from accel_plugins.testing import short_tempdir
from tests.e2e.test_dra_scheduler import bound_to, schedulable
from tests.e2e.test_kubelet_admit_claims import (
    NVIDIA,
    TIMEOUT,
    dra_plugin,
    kubeconfigs,
    published,
    readable_by_node,
)
from tests.fixtures.dra_kube import V1_34_EXTENDED, NodeClient, ServerOf
from tests.support.chart import of_kind, render

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from accel_plugins.conformance.envtest import ApiServer

pytestmark = pytest.mark.timeout(180)
ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@pytest.fixture(name="kube_apiserver")
def gated_apiserver(apiservers: ServerOf) -> ApiServer:
    return apiservers(V1_34_EXTENDED)


@pytest.fixture
async def chart_classes(kube: AsyncClient) -> AsyncIterator[dict[str, Any]]:
    """The chart's DeviceClasses in DRA mode, created; deleted after."""
    classes = of_kind(render({"kubeletApi": "dra"}), "DeviceClass")
    for obj in classes.values():
        await kube.create(cast("DeviceClass", codecs.from_dict(obj)))
    yield classes
    for name in classes:
        await kube.delete(DeviceClass, name)


def gpu_pod(namespace: str) -> Pod:
    """A pod as written for NVIDIA's device plugin: nothing about DRA in it."""
    limits = {"nvidia.com/gpu": "1"}
    container = {"name": "cuda", "image": "cuda", "resources": {"limits": limits}}
    document = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {"containers": [container]},
    }
    return cast("Pod", Pod.from_dict(document))


async def scheduler_claim(kube: AsyncClient, namespace: str, pod: str) -> ResourceClaim:
    """The claim the scheduler made for the pod's extended resource: PreBind creates and
    allocates it and records it in the pod's status before binding, so a bound pod names it."""
    found = await kube.get(Pod, pod, namespace=namespace)
    assert found.status is not None
    assert found.status.extendedResourceClaimStatus is not None
    name = found.status.extendedResourceClaimStatus.resourceClaimName
    claim = await kube.get(ResourceClaim, name, namespace=namespace)
    assert claim.metadata is not None
    assert (claim.metadata.annotations or {}).get(ANNOTATION) == "true"
    assert [o.name for o in claim.metadata.ownerReferences or []] == [pod]
    return claim


async def test_a_pod_asking_for_nvidia_gpu_is_bound_and_its_claim_prepared(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    node_client: NodeClient,
    kube_namespace: str,
    chart_classes: dict[str, Any],
    tmp_path: Path,
) -> None:
    if not kube_apiserver.scheduler:
        pytest.skip("no kube-scheduler in the assets")
    assert chart_classes["extended-gpu.nvidia.com"]["spec"]["extendedResourceName"] == (
        "nvidia.com/gpu"
    )
    namespace = kube_namespace
    _, as_node = kubeconfigs(tmp_path, kube_apiserver, kube_node)
    await schedulable(kube, kube_node)
    with short_tempdir("ext-") as root:
        async with dra_plugin(NVIDIA, tmp_path, root, kube_node, as_node):
            found = await asyncio.wait_for(published(kube, kube_node, NVIDIA.driver), TIMEOUT)
            gpus = {d.name for d in found.spec.devices or []}
            await kube.create(
                ServiceAccount(metadata=ObjectMeta(name="default", namespace=namespace))
            )
            await kube.create(gpu_pod(namespace))

            node = await asyncio.wait_for(bound_to(kube, namespace, "trainer"), TIMEOUT)
            assert node == kube_node
            claim = await scheduler_claim(kube, namespace, "trainer")
            assert claim.metadata is not None
            assert claim.metadata.name is not None
            assert claim.metadata.uid is not None
            assert claim.status is not None
            assert claim.status.allocation is not None
            assert claim.status.allocation.devices is not None
            results = claim.status.allocation.devices.results or []
            assert len(results) == 1
            assert (results[0].driver, results[0].pool) == (NVIDIA.driver, kube_node)
            assert results[0].device in gpus

            # The kubelet's side: NodePrepareResources on the driver's socket.
            await asyncio.wait_for(
                readable_by_node(node_client(kube_node), namespace, claim.metadata.name),
                TIMEOUT,
            )
            driver = DraClient(NVIDIA.driver, root / "plugins" / NVIDIA.driver / "dra.sock")
            try:
                asked = DraClaim(namespace, claim.metadata.name, claim.metadata.uid)
                prepared = (await driver.prepare([asked]))[claim.metadata.uid]
                assert prepared.error == ""
                assert [(d.pool, d.device) for d in prepared.devices] == [
                    (kube_node, results[0].device)
                ]
                # NVIDIA's container contract, from the claim's CDI spec.
                spec_file = root / "cdi" / f"k8s.{NVIDIA.driver}_claim_{claim.metadata.uid}.json"
                spec = json.loads(spec_file.read_text())
                env = [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
                assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=GPU-") for e in env), env
                assert (await driver.unprepare([asked])) == {claim.metadata.uid: ""}
            finally:
                await driver.close()
