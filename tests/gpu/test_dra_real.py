"""``accel-plugins nvidia --kubelet-api dra`` on the real GPUs, against a real API server.

Needs a GPU and ``KUBEBUILDER_ASSETS`` (kube-apiserver and etcd; hack/gpu-check unpacks
../shared/k8s when it travels along); skips without either. The slice the plugin
publishes must describe the GPUs as NVML in this test process sees them, under
NVIDIA's DRA names (``gpu-<minor>``); a claim allocated to one of them, admitted by the
kubelet emulator, must hand the container that GPU.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.resources.resource_v1 import DeviceClass

from accel_plugins.backends.nvidia.discovery import Node as GpuNode
from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.testing import short_tempdir
from tests.e2e.test_dra_kube_slices import attrs
from tests.e2e.test_kubelet_admit_claims import (
    TIMEOUT,
    BackendCase,
    admit_once,
    allocated_claim,
    bound_pod,
    device_class,
    dra_plugin,
    kubeconfigs,
    pod_manifest,
    published,
    readable_by_node,
)
from tests.fixtures.dra_kube import NodeClient

pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class RealGpus(BackendCase):
    """The NVIDIA backend on this machine's driver: no ``--simulate``."""

    def argv(self, tmp_path: Path) -> list[str]:
        return ["nvidia", "--metrics-address", ""]


async def test_real_gpus_are_published_and_a_claim_hands_out_one(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    node_client: NodeClient,
    kube_namespace: str,
    tmp_path: Path,
    gpus: GpuNode,
) -> None:
    whole = [g for g in gpus.gpus if not g.mig_enabled]
    if not whole:
        pytest.skip("every GPU here is in MIG mode")
    target = whole[-1]
    # A self-contained CDI device, as NVIDIA's DRA driver answers (issue 35).
    case = RealGpus("gpu.nvidia.com", "uuid", target.uuid, "NVIDIA_VISIBLE_DEVICES=void")
    admin, as_node = kubeconfigs(tmp_path, kube_apiserver, kube_node)
    selecting = await device_class(kube, case.selector)
    try:
        with short_tempdir("gpudra-") as root:
            async with dra_plugin(case, tmp_path, root, kube_node, as_node):
                found = await asyncio.wait_for(published(kube, kube_node, case.driver), TIMEOUT)
                devices = {d.name: attrs(d) for d in found.spec.devices or []}
                for gpu in whole:
                    described = devices[f"gpu-{gpu.minor}"]  # NVIDIA's DRA name
                    assert described["uuid"] == gpu.uuid
                    assert described["productName"] == gpu.name
                    assert described["type"] == "gpu"
                    for key in ("architecture", "cudaComputeCapability", "driverVersion"):
                        assert described.get(key), (key, described)
                print({name: described for name, described in devices.items()})

                claim, _uid = await allocated_claim(
                    kube, namespace=kube_namespace, device_class=selecting, node=kube_node,
                    device=f"gpu-{target.minor}", driver=case.driver,
                )  # fmt: skip
                await bound_pod(kube, kube_namespace, claim, kube_node)
                await asyncio.wait_for(
                    readable_by_node(node_client(kube_node), kube_namespace, claim), TIMEOUT
                )
                pod = pod_manifest(tmp_path / "pod.yaml", kube_namespace, claim)
                output = await admit_once(root, admin, pod)
                assert f"k8s.device-plugin.nvidia.com/gpu={target.uuid}" in output
                assert case.edit in output, output  # read from the node's CDI spec
                assert f"/dev/nvidia{target.minor} -> " in output, output
    finally:
        await kube.delete(DeviceClass, selecting)
