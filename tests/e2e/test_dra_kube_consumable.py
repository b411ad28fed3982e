"""Several claims on one shared GPU (consumable capacity) against a real kube-apiserver.

KEP-5075 (DRAConsumableCapacity): alpha and off by default in 1.34, where the
API server drops ``devices[].allowMultipleAllocations`` (and a capacity's
``requestPolicy``) from what it stores (kubernetes/kubernetes
pkg/registry/resource/resourceslice/strategy.go, ``dropDisabledFields``). With
the gate on, the replicas of each shared GPU of the simulated node
(tests/dra_sharing_fixtures.py) are published as that GPU once, for as many
claims as it has replicas; with it off, as the replicas. Two claims allocated
the one GPU (``shareID`` each, as the scheduler writes them: types.go
``DeviceRequestAllocationResult``) are both prepared with NVIDIA's contract.
"""

from __future__ import annotations

import itertools
import textwrap
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.types import PatchType
from prometheus_client import CollectorRegistry

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.dra import claim_cdi
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim
from accel_plugins.dra.kube import KubeClaimSource, KubeSlicePublisher
from accel_plugins.dra.model import ClaimRef, device_names, with_shared_units
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.plugin.device import DeviceTree, tree
from tests.dra_sharing_fixtures import MPS, sharing_node
from tests.e2e.test_dra_kube_slices import slices
from tests.fixtures.dra_kube import (
    V1_34,
    V1_34_SHARES,
    NodeClient,
    ServerOf,
    resource_types,
    served,
)
from tests.fixtures.generic import FakeHost
from tests.support.cdi import assert_valid_spec_file

DRIVER = "gpu.nvidia.com"
GATE_ON = pytest.param(V1_34_SHARES, id="gate-on")
GATE_OFF = pytest.param(V1_34, id="gate-off")
_names = (f"share-{i}" for i in itertools.count())
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def kube_apiserver(request: pytest.FixtureRequest, apiservers: ServerOf) -> ApiServer:
    """The API server each test names (parametrized indirectly)."""
    return apiservers(request.param)


def simulated(tmp_path: Path) -> tuple[NvidiaBackend, DeviceTree]:
    backend, _ = sharing_node(tmp_path)
    return backend, tree(backend.build(backend.check()))


def publisher(client: AsyncClient, node: str, backend: NvidiaBackend) -> KubeSlicePublisher:
    return KubeSlicePublisher(
        client,
        driver=DRIVER,
        node=node,
        registry=CollectorRegistry(),
        namer=backend,
        sharer=backend,
        describe=backend.dra_device,
    )


@pytest.mark.parametrize("kube_apiserver", [GATE_ON, GATE_OFF], indirect=True)
async def test_a_shared_gpu_is_published_once_where_the_api_server_keeps_the_field(
    kube: AsyncClient,
    kube_node: str,
    node_client: NodeClient,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    gate_on = "gate-on" in request.node.callspec.id
    backend, devices = simulated(tmp_path)
    pub = publisher(node_client(kube_node), kube_node, backend)
    await pub.publish(devices)
    await pub.wait_in_sync()
    assert pub.shares is gate_on

    found = {d.name: d for s in await slices(kube, kube_node, DRIVER) for d in s.spec.devices or []}
    replicas = sorted(n for n in found if n not in ("gpu-2", "gpu-3"))
    if gate_on:
        assert replicas == ["gpu-0", "gpu-1"]  # GPU 0 time-sliced, GPU 1 MPS: once each
        for name in replicas:
            shared = found[name]
            assert shared.allowMultipleAllocations is True
            assert shared.capacity is not None
            # As read back (a plain object): one share per replica, each claim takes one.
            assert shared.capacity["shares"] == {
                "value": "2",
                "requestPolicy": {"default": "1", "validRange": {"min": "1", "step": "1"}},
            }
            assert "replica" not in (shared.attributes or {})
        assert not found["gpu-2"].allowMultipleAllocations
    else:
        assert len(replicas) == 4  # two replicas of each shared GPU, one claim each
        assert not any(d.allowMultipleAllocations for d in found.values())
    await pub.close()


@pytest.mark.parametrize("kube_apiserver", [GATE_OFF], indirect=True)
async def test_forced_on_where_the_gate_is_off_falls_back_to_replicas(
    kube: AsyncClient, kube_node: str, node_client: NodeClient, tmp_path: Path
) -> None:
    """``--dra-shared-devices on`` on a server that drops the field: one device for one
    claim at a time would waste the other replicas, so the replicas are published."""
    backend, devices = simulated(tmp_path)
    pub = KubeSlicePublisher(
        node_client(kube_node),
        driver=DRIVER,
        node=kube_node,
        registry=CollectorRegistry(),
        namer=backend,
        sharer=backend,
        shares="on",
    )
    await pub.publish(devices)
    await pub.wait_in_sync()
    found = [d.name for s in await slices(kube, kube_node, DRIVER) for d in s.spec.devices or []]
    assert pub.shares is False
    assert len(found) == 6
    assert "gpu-0" not in found
    await pub.close()


async def allocated_claim(kube: AsyncClient, namespace: str, node: str, device: str) -> ClaimRef:
    """A claim allocated a share of ``device``, written as the scheduler writes it."""
    types = resource_types(await served(kube))
    name = next(_names)
    created: Any = await kube.create(
        cast(
            Any,
            types.ResourceClaim.from_dict(
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]
                        }
                    },
                }
            ),
        )
    )
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": node,
        "device": device,
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": {"shares": "1"},
    }
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    status = {
        "status": {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [selector]},
            }
        }
    }
    written: Any = await kube.patch(
        types.ResourceClaimStatus, name, status, namespace=namespace, patch_type=PatchType.MERGE
    )
    assert written.status.allocation.devices.results[0].shareID == result["shareID"]
    return ClaimRef(uid=created.metadata.uid, namespace=namespace, name=name)


@pytest.mark.parametrize("kube_apiserver", [GATE_ON], indirect=True)
async def test_two_claims_on_one_shared_mps_gpu_are_both_prepared(
    kube: AsyncClient, kube_namespace: str, kube_node: str, tmp_path: Path
) -> None:
    backend, devices = simulated(tmp_path)
    # The kubelet side's inventory, as the driver builds it (driver.py, _on_tree).
    named = with_shared_units(device_names(devices, backend), backend)
    inventory = Inventory(named, allocator=backend, configurer=backend, share_limits=backend)
    preparer = Preparer(
        driver=DRIVER,
        pool=kube_node,
        claims=KubeClaimSource(kube),
        cdi_dir=tmp_path / "cdi",
        checkpoint=Checkpoint(tmp_path / "checkpoint.json", DRIVER),
        inventory=lambda: inventory,
    )
    refs = [await allocated_claim(kube, kube_namespace, kube_node, "gpu-1") for _ in range(2)]

    results = await preparer.prepare(refs)

    assert all(isinstance(results[r.uid], PreparedClaim) for r in refs), results
    for ref in refs:
        spec = assert_valid_spec_file(tmp_path / "cdi" / claim_cdi.spec_file_name(DRIVER, ref.uid))
        env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == f"/mps/{MPS}/pipe"
        assert env["NVIDIA_VISIBLE_DEVICES"] == named["gpu-1"].device.facts.uuid  # type: ignore[attr-defined]
        # One share of two: half the GPU, as the MPS client limits say it.
        memory = named["gpu-1"].device.facts.memory_mib  # type: ignore[attr-defined]
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={memory // 2}M"
    shares = {cast(PreparedClaim, results[r.uid]).devices[0].share_id for r in refs}
    assert len(shares) == 2
    assert "" not in shares


SQUAT_COUNT = """
devices:
  - name: serial
    groups:
      - paths: [{path: /dev/ttyUSB0}]
        count: 3
      - paths: [{path: /dev/ttyUSB1}]
"""


@pytest.mark.parametrize("kube_apiserver", [GATE_ON, GATE_OFF], indirect=True)
async def test_a_generic_device_offered_count_times_is_published_once_with_the_gate(
    kube: AsyncClient,
    kube_node: str,
    node_client: NodeClient,
    request: pytest.FixtureRequest,
    fake_host: FakeHost,
) -> None:
    """squat's ``count``: three copies of ttyUSB0 become one device for three claims;
    ttyUSB1 (count 1) stays a device of its own."""
    gate_on = "gate-on" in request.node.callspec.id
    fake_host.node("/dev/ttyUSB0")
    fake_host.node("/dev/ttyUSB1")
    backend = GenericBackend(parse_config(textwrap.dedent(SQUAT_COUNT)), fake_host.settings())
    pub = KubeSlicePublisher(
        node_client(kube_node),
        driver="generic.accel-plugins.io",
        node=kube_node,
        registry=CollectorRegistry(),
        sharer=backend,
    )
    await pub.publish(backend.discover())
    await pub.wait_in_sync()

    found = [
        d
        for s in await slices(kube, kube_node, "generic.accel-plugins.io")
        for d in s.spec.devices or []
    ]
    multi = [d for d in found if d.allowMultipleAllocations]
    if gate_on:
        assert len(found) == 2
        (shared,) = multi
        assert shared.name.startswith("shared-")
        assert shared.capacity is not None
        assert shared.capacity["shares"]["value"] == "3"
    else:
        assert (len(found), multi) == (4, [])
    await pub.close()
