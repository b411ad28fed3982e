"""A pod whose claim comes from a ResourceClaimTemplate, admitted by the kubelet emulator.

The kubelet finds such a claim through the pod's ``status.resourceClaimStatuses``
(k8s.io/dynamic-resource-allocation ``resourceclaim.Name``) and uses it only when the pod owns it
(``resourceclaim.IsForPod``). No controller manager runs beside the test's API server,
so the test does what the ResourceClaim controller would: it creates the claim with
the pod as its controlling owner and records its name in the pod's status (the Node
authorizer reads that status too, before the node may read the claim). Then the real
generic plugin, in DRA mode, prepares it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, PodStatus, ServiceAccount
from lightkube.resources.resource_v1 import DeviceClass
from lightkube.types import PatchType

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.testing import short_tempdir
from tests.e2e.test_kubelet_admit_claims import (
    GENERIC,
    TIMEOUT,
    admit_once,
    allocated_claim,
    device_class,
    dra_plugin,
    kubeconfigs,
    published,
    readable_by_node,
    reserve,
    selected_device,
)
from tests.fixtures.dra_kube import NodeClient

pytestmark = pytest.mark.timeout(120)


def templated_pod(namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "nodeName": node,
            "resourceClaims": [{"name": "accel", "resourceClaimTemplateName": "one-accel"}],
            "containers": [
                {"name": "main", "image": "x", "resources": {"claims": [{"name": "accel"}]}}
            ],
        },
    }


async def test_a_claim_from_a_template_is_found_in_the_pod_status_and_must_be_the_pods(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    node_client: NodeClient,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    namespace = kube_namespace
    admin, as_node = kubeconfigs(tmp_path, kube_apiserver, kube_node)
    selecting = await device_class(kube, GENERIC.selector)
    try:
        with short_tempdir("admittpl-") as root:
            async with dra_plugin(GENERIC, tmp_path, root, kube_node, as_node):
                found = await asyncio.wait_for(published(kube, kube_node, GENERIC.driver), TIMEOUT)
                device = selected_device(found, GENERIC)
                await kube.create(
                    ServiceAccount(metadata=ObjectMeta(name="default", namespace=namespace))
                )
                document = templated_pod(namespace, kube_node)
                pod = await kube.create(cast(Pod, Pod.from_dict(document)))
                assert pod.metadata is not None
                assert pod.metadata.uid is not None
                # As the ResourceClaim controller would make it: the pod its controller.
                claim, uid = await allocated_claim(
                    kube, namespace, selecting, kube_node, device, GENERIC.driver,
                    owner_pod=("trainer", pod.metadata.uid),
                )  # fmt: skip
                await reserve(kube, namespace, claim, pod.metadata.uid)
                statuses = [{"name": "accel", "resourceClaimName": claim}]
                await kube.patch(
                    PodStatus,
                    "trainer",
                    {"status": {"resourceClaimStatuses": statuses}},
                    namespace=namespace,
                    patch_type=PatchType.MERGE,
                )
                await asyncio.wait_for(
                    readable_by_node(node_client(kube_node), namespace, claim), TIMEOUT
                )

                # The pod as the API server returns it: its UID and its claim statuses.
                as_served = await kube.get(Pod, "trainer", namespace=namespace)
                manifest = tmp_path / "pod.yaml"
                manifest.write_text(yaml.safe_dump(as_served.to_dict()))
                output = await admit_once(root, admin, manifest)
                assert f"claim accel: ResourceClaim {namespace}/{claim} ({uid})" in output
                assert f"k8s.{GENERIC.driver}/claim={uid}-accel" in output
                assert f"pod {namespace}/trainer: resource claims unprepared" in output

                # Another pod of the same name owns nothing here: refused, as IsForPod does.
                stranger = as_served.to_dict()
                stranger["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"
                manifest.write_text(yaml.safe_dump(stranger))
                refused = await admit_once(root, admin, manifest, expect=1)
                assert f"ResourceClaim {claim} ({uid}) was not created for pod" in refused

                # No status entry yet: the controller has not made the claim.
                pending = document | {"status": {}}
                manifest.write_text(yaml.safe_dump(pending))
                waiting = await admit_once(root, admin, manifest, expect=1)
                assert "no ResourceClaim from template one-accel yet" in waiting
    finally:
        await kube.delete(DeviceClass, selecting)
