"""Shares and admin access allocated by the real kube-scheduler, prepared by our driver.

Consumable capacity (KEP-5075; alpha in 1.34 behind ``DRAConsumableCapacity``,
beta and on by default in 1.36): the MPS-shared GPU of the simulated node
(tests/dra_sharing_fixtures.py) is published once with ``shares: 2``. One claim
asks for it twice (two requests, one share each); the scheduler gives each
request its own ``shareID`` (kubernetes/kubernetes
``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/experimental/
allocator_experimental.go``: a new share ID per allocation of a multi-allocatable
device), and the answer to the kubelet keeps them apart: two entries, each with
its ``share_id`` and its own CDI device holding half the GPU. A second claim
for one more share of that GPU cannot be allocated (its pod stays Pending).

Admin access (KEP-5018; beta in 1.34, GA in 1.36): the API server refuses an
``adminAccess`` request outside a namespace labelled
``resource.kubernetes.io/admin-access: "true"`` (pkg/registry/resource/
resourceclaim/strategy.go, ``adminaccess.go``), and the scheduler allocates such
a request a whole GPU another claim holds (the allocator skips its check of
allocated devices for admin access). The monitor's answer has the GPU and
``DRA_ADMIN_ACCESS=true``, and nothing counts it as holding the device. (The
1.34 scheduler did not allocate an admin request a shared GPU whose shares were
all taken: capacity is still counted for it there.)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount
from lightkube.resources.resource_v1 import ResourceClaim

from accel_plugins.conformance.cluster import ADMIN_ACCESS_LABELS
from accel_plugins.conformance.envtest import ApiServer, scheduler_missing
from accel_plugins.dra import claim_cdi
from accel_plugins.dra.attribution import ADMIN, ClaimAttribution
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim
from accel_plugins.dra.claim_answer import ADMIN_ACCESS_ENV
from accel_plugins.dra.kube import ApiVersions, KubeClaimSource, KubeClaimStatus
from accel_plugins.dra.model import ClaimRef, device_names, with_shared_units
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.dra.service import prepare_response
from accel_plugins.plugin.device import tree
from accel_plugins.switch.probes import DraSide
from tests.dra_sharing_fixtures import sharing_node
from tests.e2e.test_dra_kube_consumable import publisher as sharing_publisher
from tests.e2e.test_dra_scheduler import bound_to, schedulable
from tests.e2e.test_kubelet_admit_claims import device_class
from tests.fixtures.dra_kube import V1_34_SHARES, NodeClient, ServerOf
from tests.support.cdi import assert_valid_spec_file
from tests.support.polling import until

DRIVER = "gpu.nvidia.com"
TIMEOUT = 30.0
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kube_apiserver(apiservers: ServerOf) -> ApiServer:
    server = apiservers(V1_34_SHARES)
    if not server.scheduler:
        pytest.skip(f"no kube-scheduler: {scheduler_missing()}")
    return server


def request(name: str, device_class: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class, **fields}}


async def claim_and_pod(
    kube: AsyncClient, namespace: str, name: str, requests: list[dict[str, Any]]
) -> None:
    """A claim of ``requests`` and a pod ``name`` whose container uses all of it."""
    await kube.create(
        cast(
            ResourceClaim,
            ResourceClaim.from_dict(
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"devices": {"requests": requests}},
                }
            ),
        )
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceClaims": [{"name": "c", "resourceClaimName": name}],
            "containers": [
                {"name": "main", "image": "x", "resources": {"claims": [{"name": "c"}]}}
            ],
        },
    }
    await kube.create(cast(Pod, Pod.from_dict(pod)))


async def allocated(kube: AsyncClient, namespace: str, name: str) -> tuple[ClaimRef, list[Any]]:
    try:
        await asyncio.wait_for(bound_to(kube, namespace, name), TIMEOUT)
    except TimeoutError:
        pod = await kube.get(Pod, name, namespace=namespace)
        raise AssertionError(f"pod {name} not bound: {pod.status}") from None
    claim = await kube.get(ResourceClaim, name, namespace=namespace)
    assert claim.metadata is not None
    assert claim.metadata.uid is not None
    assert claim.status is not None
    assert claim.status.allocation is not None
    assert claim.status.allocation.devices is not None
    ref = ClaimRef(claim.metadata.uid, namespace, name)
    return ref, list(claim.status.allocation.devices.results or [])


async def unschedulable(kube: AsyncClient, namespace: str, name: str) -> str:
    """The scheduler's message once it has given up on the pod for now."""

    async def condition() -> str:
        pod = await kube.get(Pod, name, namespace=namespace)
        for c in (pod.status.conditions if pod.status else None) or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c.message or "(no message)"
        return ""

    return await until(condition, f"pod {name} unschedulable", TIMEOUT)


async def namespace(kube: AsyncClient, name: str, *, admin: bool) -> str:
    labels = dict.fromkeys(ADMIN_ACCESS_LABELS, "true") if admin else {}
    await kube.create(Namespace(metadata=ObjectMeta(name=name, labels=labels)))
    await kube.create(ServiceAccount(metadata=ObjectMeta(name="default", namespace=name)))
    return name


async def test_two_shares_of_one_gpu_in_one_claim_and_a_monitor_beside_them(
    kube: AsyncClient,
    kube_node: str,
    node_client: NodeClient,
    tmp_path: Path,
) -> None:
    backend, _ = sharing_node(tmp_path)
    devices = tree(backend.build(backend.check()))
    named = with_shared_units(device_names(devices, backend), backend)
    mps_gpu = named["gpu-1"].device.facts  # the MPS-shared GPU, published once
    publisher = sharing_publisher(node_client(kube_node), kube_node, backend)
    await publisher.publish(devices)
    await publisher.wait_in_sync()
    assert publisher.shares
    await schedulable(kube, kube_node)
    uuid = mps_gpu.uuid  # type: ignore[attr-defined]
    selecting = await device_class(
        kube, f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].uuid == "{uuid}"'
    )
    inventory = Inventory(named, allocator=backend, configurer=backend, share_limits=backend)
    status = KubeClaimStatus(
        kube, ApiVersions(kube), driver=DRIVER, node=kube_node, describe=backend.dra_device
    )
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", DRIVER)
    preparer = Preparer(
        driver=DRIVER,
        pool=kube_node,
        claims=KubeClaimSource(kube, status=status),
        cdi_dir=tmp_path / "cdi",
        checkpoint=checkpoint,
        inventory=lambda: inventory,
    )
    workloads = await namespace(kube, f"work-{kube_node}", admin=False)
    monitors = await namespace(kube, f"mon-{kube_node}", admin=True)

    # Two shares of the MPS GPU in one claim: two results, two share IDs.
    await claim_and_pod(kube, workloads, "pair", [request("a", selecting), request("b", selecting)])
    ref, results = await allocated(kube, workloads, "pair")
    memory = mps_gpu.memory_mib  # type: ignore[attr-defined]
    # One share each, and with it half the memory (a capacity without a policy would be
    # taken whole by the first share: shares.py per_share).
    half = {"shares": "1", "memory": f"{memory // 2}Mi"}
    assert [(r.device, r.consumedCapacity) for r in results] == [("gpu-1", half)] * 2
    shares = [r.shareID for r in results]
    assert len(set(shares)) == 2
    assert None not in shares

    prepared = (await preparer.prepare([ref]))[ref.uid]
    assert isinstance(prepared, PreparedClaim), prepared
    answer = prepare_response(prepared)
    assert sorted(d.share_id for d in answer.devices) == sorted(shares)
    # The claim's status has an entry per share (its shareID is one of the list's keys).
    await status.idle()
    claim = await kube.get(ResourceClaim, "pair", namespace=workloads)
    entries = claim.to_dict()["status"]["devices"]
    assert sorted((e["device"], e["shareID"]) for e in entries) == sorted(
        ("gpu-1", s) for s in shares
    )
    ids = [list(d.cdi_device_ids) for d in answer.devices]
    assert len({i for each in ids for i in each}) == 2, ids  # one CDI device per share
    spec = assert_valid_spec_file(tmp_path / "cdi" / claim_cdi.spec_file_name(DRIVER, ref.uid))
    for cdi in spec["devices"]:
        env = dict(e.split("=", 1) for e in cdi["containerEdits"]["env"])
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory // 2}M"

    # Both shares are taken: one more claim of the GPU waits.
    await claim_and_pod(kube, workloads, "third", [request("a", selecting)])
    assert "cannot allocate all claims" in await unschedulable(kube, workloads, "third")

    # Admin access to a whole GPU a workload holds: refused where the namespace is not
    # labelled for it ...
    whole = named["gpu-2"].device.facts.uuid  # type: ignore[attr-defined]
    gpu_2 = await device_class(
        kube, f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].uuid == "{whole}"'
    )
    await claim_and_pod(kube, workloads, "holder", [request("g", gpu_2)])
    held_ref, _ = await allocated(kube, workloads, "holder")
    assert isinstance((await preparer.prepare([held_ref]))[held_ref.uid], PreparedClaim)
    with pytest.raises(ApiError) as refused:
        await claim_and_pod(kube, workloads, "peek", [request("m", gpu_2, adminAccess=True)])
    assert "admin-access" in str(refused.value.status.message)
    # ... and allocated the held GPU where it is: the monitor sees it and holds nothing.
    await claim_and_pod(kube, monitors, "monitor", [request("m", gpu_2, adminAccess=True)])
    admin_ref, admin_results = await allocated(kube, monitors, "monitor")
    assert [(r.device, r.adminAccess) for r in admin_results] == [("gpu-2", True)]
    watched = (await preparer.prepare([admin_ref]))[admin_ref.uid]
    assert isinstance(watched, PreparedClaim), watched
    spec = assert_valid_spec_file(
        tmp_path / "cdi" / claim_cdi.spec_file_name(DRIVER, admin_ref.uid)
    )
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert env[ADMIN_ACCESS_ENV] == "true"
    assert env["NVIDIA_VISIBLE_DEVICES"] == whole
    saved = json.loads(checkpoint.path.read_text())["claims"][admin_ref.uid]
    assert saved["devices"][0]["adminAccess"] is True
    # The per-node switch would wait for the workloads only, not for the monitor.
    blockers = await DraSide(checkpoint.path.parent.parent, checkpoint.path.parent.name).read()
    assert {h.holder for h in blockers.held} == {f"{workloads}/pair", f"{workloads}/holder"}
    # /metrics attribution: the workload holds the GPU, the monitor is named as such.
    holders = ClaimAttribution(lambda: preparer.prepared, lambda: inventory).holders_of(
        named["gpu-2"].resource
    )
    assert {(p.namespace, p.pod, p.container) for p in holders[named["gpu-2"].device.id]} == {
        (workloads, "holder", ""),
        (monitors, "monitor", ADMIN),
    }
    await status.close()
    await publisher.close()
