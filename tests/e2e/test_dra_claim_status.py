"""A claim's ``status.devices`` names what our driver prepared, on a real kube-apiserver.

For every prepared device, an entry keyed by driver, pool, device and share
(resource.k8s.io types.go ``AllocatedDeviceStatus``) with a ``Ready`` condition and
data naming the device (NVIDIA: the GPU's ``uuid`` and ``pciBusID``), removed on
Unprepare; on each served API version (1.33's v1beta2, 1.34's and 1.36's v1).
Then the chart's RBAC on 1.36, where writing ``status.devices`` also takes
``associated-node`` on ``resourceclaims/driver`` (kubernetes/kubernetes
pkg/registry/resource/resourceclaim/strategy.go, ``DRAResourceClaimGranularStatusAuthorization``
beta): the driver's pod-bound token writes its own node's claims and is refused another
node's, and without the chart's rule it writes none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import ApiError, AsyncClient
from lightkube.types import PatchType

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim
from accel_plugins.dra.kube import ApiVersions, KubeClaimSource, KubeClaimStatus
from accel_plugins.dra.model import ClaimRef, device_names, with_shared_units
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.plugin.device import tree
from tests.dra_sharing_fixtures import sharing_node
from tests.fixtures.dra_kube import DRA_VERSIONS, V1_36, ServerOf, resource_types, served

DRIVER = "gpu.nvidia.com"
pytestmark = pytest.mark.timeout(120)
_names = iter(f"status-{i}" for i in range(1000))


async def allocated(kube: AsyncClient, namespace: str, node: str, device: str) -> ClaimRef:
    """A claim allocated ``device`` of our driver on ``node``, as the scheduler writes it."""
    types = resource_types(await served(kube))
    name = next(_names)
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}
    created: Any = await kube.create(
        cast(
            Any,
            types.ResourceClaim.from_dict(
                {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
            ),
        )
    )
    result = {"request": "gpu", "driver": DRIVER, "pool": node, "device": device}
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    allocation = {
        "devices": {"results": [result]},
        "nodeSelector": {"nodeSelectorTerms": [selector]},
    }
    await kube.patch(
        types.ResourceClaimStatus,
        name,
        {"status": {"allocation": allocation}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    return ClaimRef(uid=created.metadata.uid, namespace=namespace, name=name)


async def status_devices(kube: AsyncClient, ref: ClaimRef) -> list[dict[str, Any]]:
    types = resource_types(await served(kube))
    claim: Any = await kube.get(types.ResourceClaim, ref.name, namespace=ref.namespace)
    return list(claim.to_dict().get("status", {}).get("devices") or [])


@pytest.fixture
def kube_apiserver(apiservers: ServerOf, request: pytest.FixtureRequest) -> ApiServer:
    """The API server each test names (parametrized indirectly)."""
    return apiservers(request.param)


@pytest.mark.parametrize(
    "kube_apiserver", [pytest.param(k, id=k.name) for k in DRA_VERSIONS], indirect=True
)
async def test_prepared_devices_are_named_in_the_claims_status(
    kube: AsyncClient, kube_namespace: str, kube_node: str, tmp_path: Path
) -> None:
    backend, _ = sharing_node(tmp_path)
    named = with_shared_units(device_names(tree(backend.build(backend.check())), backend), backend)
    inventory = Inventory(named, allocator=backend, configurer=backend)
    apis = ApiVersions(kube)
    status = KubeClaimStatus(kube, apis, driver=DRIVER, node=kube_node, describe=backend.dra_device)
    preparer = Preparer(
        driver=DRIVER,
        pool=kube_node,
        claims=KubeClaimSource(kube, apis, status),
        cdi_dir=tmp_path / "cdi",
        checkpoint=Checkpoint(tmp_path / "checkpoint.json", DRIVER),
        inventory=lambda: inventory,
    )
    ref = await allocated(kube, kube_namespace, kube_node, "gpu-2")
    assert isinstance((await preparer.prepare([ref]))[ref.uid], PreparedClaim)
    await status.idle()

    (entry,) = await status_devices(kube, ref)
    facts = named["gpu-2"].device.facts
    assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, kube_node, "gpu-2")
    (ready,) = entry["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Prepared")
    assert entry["data"]["uuid"] == facts.uuid  # type: ignore[attr-defined]
    assert entry["data"]["pciBusID"] == facts.pci_bus_id.lower()  # type: ignore[attr-defined]
    assert entry["data"]["id"] == named["gpu-2"].device.id

    # Prepared again (the kubelet retries): answered from the checkpoint, nothing rewritten.
    writes = status.writes
    await preparer.prepare([ref])
    await status.idle()
    assert status.writes == writes

    await preparer.unprepare([ref])
    await status.idle()
    assert await status_devices(kube, ref) == []
    assert status.failures == 0
    await status.close()


@pytest.mark.parametrize("kube_apiserver", [V1_36], ids=["v1.36"], indirect=True)
async def test_the_charts_rbac_writes_its_own_nodes_claims_status_on_1_36(
    kube: AsyncClient, kube_apiserver: ApiServer, kube_namespace: str, kube_node: str
) -> None:
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Node
    from lightkube.resources.rbac_authorization_v1 import ClusterRole

    from accel_plugins.dra.model import DeviceReport
    from accel_plugins.plugin.device import Device
    from tests.unit.chart.test_chart_dra import ACCOUNT, _apply, _dra_objects, pod_client

    objects = [o for o in _dra_objects() if o["kind"] != "DeviceClass"]
    await _apply(kube, objects)
    other = f"{kube_node}-b"
    await kube.create(Node(metadata=ObjectMeta(name=other)))
    client = await pod_client(kube, kube_apiserver, kube_node)
    apis = ApiVersions(client)
    status = KubeClaimStatus(client, apis, driver=DRIVER, node=kube_node)

    def report(node: str) -> list[DeviceReport]:
        return [DeviceReport(node, "gpu-0", "", "nvidia.com/gpu", Device("GPU-0"))]

    rules: list[Any] = []
    try:
        mine = await allocated(kube, kube_namespace, kube_node, "gpu-0")
        status.claim_prepared(mine, report(kube_node))
        await status.idle()
        assert (status.writes, status.failures) == (1, 0)
        assert [d["device"] for d in await status_devices(kube, mine)] == ["gpu-0"]

        theirs = await allocated(kube, kube_namespace, other, "gpu-0")
        status.claim_prepared(theirs, report(other))
        await status.idle()
        assert (status.writes, status.failures) == (1, 1)  # another node's claim: refused
        assert await status_devices(kube, theirs) == []

        # Without the chart's resourceclaims/driver rule, resourceclaims/status alone:
        # 1.36 refuses even the driver's own node's claim (what the rule is for).
        role: Any = await kube.get(ClusterRole, ACCOUNT)
        rules = [r.to_dict() for r in role.rules]
        kept = [r for r in role.rules if "resourceclaims/driver" not in (r.resources or [])]
        await kube.patch(ClusterRole, ACCOUNT, {"rules": [r.to_dict() for r in kept]})
        again = await allocated(kube, kube_namespace, kube_node, "gpu-0")
        with pytest.raises(ApiError) as refused:
            await client.patch(
                resource_types(await served(kube)).ResourceClaimStatus,
                again.name,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": again.name, "namespace": again.namespace},
                    "status": {
                        "devices": [{"driver": DRIVER, "pool": kube_node, "device": "gpu-0"}]
                    },
                },
                namespace=again.namespace,
                patch_type=PatchType.APPLY,
                field_manager=DRIVER,
                force=True,
            )
        # Refused as an invalid write (422), naming the verb and the synthetic resource.
        assert refused.value.status.code == 422
        assert 'associated-node:patch resource "resourceclaims/driver"' in str(
            refused.value.status.message
        )
    finally:
        await status.close()
        await client.close()
        if rules:  # the rule back, for later tests
            await kube.patch(ClusterRole, ACCOUNT, {"rules": rules})
        await kube.delete(Node, other)
