"""KubeClaimSource against a real kube-apiserver: claims allocated as the scheduler would.

No kube-scheduler runs here, so each test writes ``status.allocation`` itself
(the status subresource, as the scheduler does) with results for our driver,
another driver and another node's pool; the source must keep only ours.
Each test runs against every DRA version (1.34, 1.33, 1.36), the claims
written in the version the server serves; the last one prepares a claim.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from accel_plugins.dra import claim_cdi
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim
from accel_plugins.dra.kube import KubeClaimSource
from accel_plugins.dra.model import AllocatedDevice, ClaimError, ClaimRef, device_names
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.plugin.device import Device, DeviceNode, tree
from accel_plugins.plugin.dra_names import dra_device_name
from tests.fixtures.dra_kube import (
    every_dra_version,  # noqa: F401 (the API server of each DRA version)
    resource_types,
    served,
)
from tests.support.cdi import assert_valid_spec_file

DRIVER = "gpu.nvidia.com"
POOL = "node-under-test"
GPU = dra_device_name("GPU-5ae5e3c4-0000-4b5e-8c10-0123456789ab")
_claims = (f"claim-{i}" for i in itertools.count())


@pytest.fixture
async def namespace(kube: AsyncClient) -> AsyncIterator[str]:
    name = f"dra-{next(_claims)}"
    await kube.create(Namespace(metadata=ObjectMeta(name=name)))
    yield name
    await kube.delete(Namespace, name)


@pytest.fixture
async def gpu_class(kube: AsyncClient) -> AsyncIterator[str]:
    name = "claims-test-gpu.example.com"  # not gpu.nvidia.com: other tests may create that
    device_class = resource_types(await served(kube)).DeviceClass
    await kube.create(
        device_class.from_dict(
            {
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    )
    yield name
    await kube.delete(device_class, name)


async def make_claim(kube: AsyncClient, namespace: str, device_class: str) -> ClaimRef:
    name = next(_claims)
    claim_type = resource_types(await served(kube)).ResourceClaim
    created = await kube.create(
        cast(
            Any,
            claim_type.from_dict(
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpu", "exactly": {"deviceClassName": device_class}},
                                {"name": "nic", "exactly": {"deviceClassName": device_class}},
                            ]
                        }
                    },
                }
            ),
        )
    )
    assert created.metadata is not None
    assert created.metadata.uid is not None
    return ClaimRef(uid=created.metadata.uid, namespace=namespace, name=name)


async def allocate(
    kube: AsyncClient,
    claim: ClaimRef,
    results: list[dict[str, Any]],
    reserved_for: list[dict[str, str]] | None = None,
) -> None:
    """What the scheduler writes: the allocation, with a node selector for our node, and
    the consumers it reserves the claim for."""
    status: dict[str, Any] = {
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [POOL]}
                            ]
                        }
                    ]
                },
            }
        }
    }
    if reserved_for:
        status["status"]["reservedFor"] = reserved_for
    await kube.patch(
        resource_types(await served(kube)).ResourceClaimStatus,
        claim.name,
        status,
        namespace=claim.namespace,
        patch_type=PatchType.MERGE,
    )


def result(request: str, device: str, *, driver: str = DRIVER, pool: str = POOL) -> dict[str, str]:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


async def test_allocated_claim_resolves_to_our_devices_only(
    kube: AsyncClient, namespace: str, gpu_class: str
) -> None:
    claim = await make_claim(kube, namespace, gpu_class)
    await allocate(
        kube,
        claim,
        [
            result("gpu", GPU),
            result("nic", "eth0", driver="nic.example.com"),  # another driver's device
            result("gpu", "gpu-1", pool="another-node"),  # another node's pool
        ],
    )
    resolved = await KubeClaimSource(kube).resolve(claim, DRIVER, POOL)
    assert resolved.ref == claim
    assert resolved.devices == (
        AllocatedDevice(request="gpu", driver=DRIVER, pool=POOL, device=GPU),
    )


async def test_the_pods_a_claim_is_reserved_for_come_with_it(
    kube: AsyncClient, namespace: str, gpu_class: str
) -> None:
    """status.reservedFor names the claim's consumers; the pods among them hold its devices
    (the driver's /metrics names them)."""
    claim = await make_claim(kube, namespace, gpu_class)
    consumers = [
        {"resource": "pods", "name": "trainer-0", "uid": "11111111-1111-1111-1111-111111111111"},
        {
            "apiGroup": "example.com",
            "resource": "pods",  # a resource of another group, though named alike
            "name": "not-a-pod",
            "uid": "22222222-2222-2222-2222-222222222222",
        },
    ]
    await allocate(kube, claim, [result("gpu", GPU)], reserved_for=consumers)
    resolved = await KubeClaimSource(kube).resolve(claim, DRIVER, POOL)
    assert resolved.consumers == ("trainer-0",)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        pytest.param("unallocated", "is not allocated", id="unallocated"),
        pytest.param("uid-mismatch", "has UID", id="uid-mismatch"),
        pytest.param("missing", "not found", id="missing"),
    ],
)
async def test_claims_that_cannot_be_prepared(
    kube: AsyncClient, namespace: str, gpu_class: str, case: str, message: str
) -> None:
    claim = await make_claim(kube, namespace, gpu_class)
    if case == "uid-mismatch":
        await allocate(kube, claim, [result("gpu", GPU)])
        claim = ClaimRef(
            uid="00000000-0000-0000-0000-000000000000", namespace=namespace, name=claim.name
        )
    elif case == "missing":
        claim = ClaimRef(uid=claim.uid, namespace=namespace, name="no-such-claim")
    with pytest.raises(ClaimError, match=message):
        await KubeClaimSource(kube).resolve(claim, DRIVER, POOL)


async def test_a_claim_is_prepared_from_what_the_api_server_allocated(
    kube: AsyncClient, namespace: str, gpu_class: str, tmp_path: Path
) -> None:
    """NodePrepareResources' core (the Preparer) with the real claim source: the allocation
    read in the served version becomes the claim's CDI spec; another driver's result is not
    ours to prepare."""
    devices = tree({"nvidia.com/gpu": [Device(GPU, nodes=(DeviceNode("/dev/nvidia0"),))]})
    inventory = Inventory(device_names(devices))
    preparer = Preparer(
        driver=DRIVER,
        pool=POOL,
        claims=KubeClaimSource(kube),
        cdi_dir=tmp_path / "cdi",
        checkpoint=Checkpoint(tmp_path / "checkpoint.json", DRIVER),
        inventory=lambda: inventory,
    )
    claim = await make_claim(kube, namespace, gpu_class)
    await allocate(
        kube, claim, [result("gpu", GPU), result("nic", "eth0", driver="nic.example.com")]
    )
    prepared = (await preparer.prepare([claim]))[claim.uid]
    assert isinstance(prepared, PreparedClaim)
    assert [(d.requests, d.device) for d in prepared.devices] == [(("gpu",), GPU)]
    spec = assert_valid_spec_file(tmp_path / "cdi" / claim_cdi.spec_file_name(DRIVER, claim.uid))
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0", "permissions": "rw"}
    ]


# -- a claim is read once: kept with a watch of that claim ----------------------------


async def deallocate(kube: AsyncClient, claim: ClaimRef) -> None:
    """What the resourceclaim controller writes once no pod uses the claim."""
    await kube.patch(
        resource_types(await served(kube)).ResourceClaimStatus,
        claim.name,
        {"status": {"allocation": None}},
        namespace=claim.namespace,
        patch_type=PatchType.MERGE,
    )


@pytest.mark.parametrize(
    ("change", "then"),
    [
        pytest.param("deallocate", "is not allocated", id="deallocated"),
        pytest.param("reallocate", "gpu-7", id="deallocated-and-allocated-other-devices"),
        pytest.param("delete", "not found", id="deleted"),
    ],
)
async def test_each_prepare_reads_the_claim_as_it_is_now(
    kube: AsyncClient, namespace: str, gpu_class: str, change: str, then: str
) -> None:
    """One GET per resolve, nothing kept and no watch (issue 31: a watch per prepared
    claim cost the API server a long-lived request each); a prepared claim is answered
    from the checkpoint, so a claim is read again only when it was not prepared."""
    claim = await make_claim(kube, namespace, gpu_class)
    await allocate(kube, claim, [result("gpu", GPU)])
    source = KubeClaimSource(kube)
    await source.resolve(claim, DRIVER, POOL)
    if change == "delete":
        types = resource_types(await served(kube))
        await kube.delete(types.ResourceClaim, claim.name, namespace=claim.namespace)
    else:
        await deallocate(kube, claim)
        if change == "reallocate":
            await allocate(kube, claim, [result("gpu", "gpu-7")])
    if change == "reallocate":
        resolved = await source.resolve(claim, DRIVER, POOL)
        assert [d.device for d in resolved.devices] == [then]
    else:
        with pytest.raises(ClaimError, match=then):
            await source.resolve(claim, DRIVER, POOL)
    assert source.reads == 2
