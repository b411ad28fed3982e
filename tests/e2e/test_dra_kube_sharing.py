"""Shared GPUs in DRA mode against a real kube-apiserver: opaque GpuConfig in claims.

Claims carry NVIDIA's ``GpuConfig`` (NVIDIA/k8s-dra-driver-gpu
``api/nvidia.com/resource/v1beta1/sharing.go``) in ``spec.devices.config``; the
API server validates them (``opaque.driver`` a DNS subdomain, ``parameters`` a
JSON object: kubernetes/kubernetes pkg/apis/resource/validation/validation.go
``validateOpaqueConfiguration``) and, as the scheduler does, each test copies
them into ``status.allocation.devices.config`` with the allocation. The real
claim source reads them back in the served DRA version and the Preparer hands
them, with the allocated replicas, to the simulated NVIDIA node
(tests/dra_sharing_fixtures.py).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.types import PatchType

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.dra import claim_cdi
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim
from accel_plugins.dra.kube import KubeClaimSource
from accel_plugins.dra.model import ClaimRef, NamedDevice, OpaqueConfig, device_names
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.plugin.device import tree
from tests.dra_sharing_fixtures import MPS, TIME_SLICED, gpu_config, mps_config, sharing_node
from tests.fixtures.dra_kube import (
    every_dra_version,  # noqa: F401 (the API server of each DRA version)
    resource_types,
    served,
)
from tests.support.cdi import assert_valid_spec_file

DRIVER = "gpu.nvidia.com"
POOL = "sharing-node"
CLASS = "sharing-test-gpu.example.com"
_names = (f"shared-{i}" for i in itertools.count())


@pytest.fixture
async def gpu_class(kube: AsyncClient) -> Any:
    device_class = resource_types(await served(kube)).DeviceClass
    await kube.create(
        device_class.from_dict(
            {
                "metadata": {"name": CLASS},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    )
    yield CLASS
    await kube.delete(device_class, CLASS)


def node(tmp_path: Path) -> tuple[NvidiaBackend, Inventory]:
    backend, _ = sharing_node(tmp_path)
    devices = tree(backend.build(backend.check()))
    named = device_names(devices, backend)
    return backend, Inventory(named, allocator=backend, configurer=backend)


def replicas(inventory: Inventory, resource: str) -> list[tuple[str, NamedDevice]]:
    found = [(n, d) for n, d in inventory.devices.items() if d.resource == resource]
    return sorted(found, key=lambda item: gpu_facts(item[1].device).replica or 0)


async def claim_with(
    kube: AsyncClient, namespace: str, device: str, parameters: dict[str, Any] | None
) -> ClaimRef:
    """A claim for one device of our class, with ``parameters`` as its opaque config,
    allocated ``device`` on our node as the scheduler would write it."""
    types = resource_types(await served(kube))
    name = next(_names)
    config = (
        [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": parameters}}]
        if parameters is not None
        else []
    )
    spec = {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}],
            "config": config,
        }
    }
    created = await kube.create(
        cast(
            Any,
            types.ResourceClaim.from_dict(
                {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
            ),
        )
    )
    ref = ClaimRef(uid=created.metadata.uid, namespace=namespace, name=name)
    status = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": POOL, "device": device}
                    ],
                    "config": [{"source": "FromClaim", **c} for c in config],
                },
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
    await kube.patch(
        types.ResourceClaimStatus, name, status, namespace=namespace, patch_type=PatchType.MERGE
    )
    return ref


def preparer(kube: AsyncClient, tmp_path: Path, inventory: Inventory) -> Preparer:
    return Preparer(
        driver=DRIVER,
        pool=POOL,
        claims=KubeClaimSource(kube),
        cdi_dir=tmp_path / "cdi",
        checkpoint=Checkpoint(tmp_path / "checkpoint.json", DRIVER),
        inventory=lambda: inventory,
    )


def env_of(tmp_path: Path, ref: ClaimRef) -> dict[str, str]:
    spec = assert_valid_spec_file(tmp_path / "cdi" / claim_cdi.spec_file_name(DRIVER, ref.uid))
    return dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])


async def test_the_claim_source_reads_opaque_configs_in_every_version(
    kube: AsyncClient, kube_namespace: str, gpu_class: str, tmp_path: Path
) -> None:
    parameters = mps_config(defaultActiveThreadPercentage=25)
    ref = await claim_with(kube, kube_namespace, "gpu-0", parameters)
    resolved = await KubeClaimSource(kube).resolve(ref, DRIVER, POOL)
    assert resolved.configs == (OpaqueConfig(parameters, ("gpu",), "FromClaim", 0),)


async def test_two_claims_share_a_time_sliced_and_an_mps_gpu(
    kube: AsyncClient, kube_namespace: str, gpu_class: str, tmp_path: Path
) -> None:
    _, inventory = node(tmp_path)
    prepare = preparer(kube, tmp_path, inventory).prepare
    (sliced_a, gpu0), (sliced_b, _) = replicas(inventory, TIME_SLICED)
    (mps_a, gpu1), (mps_b, _) = replicas(inventory, MPS)
    uuid0, uuid1 = gpu_facts(gpu0.device).uuid, gpu_facts(gpu1.device).uuid
    refs = [
        await claim_with(kube, kube_namespace, sliced_a, None),
        await claim_with(kube, kube_namespace, sliced_b, gpu_config({"strategy": "TimeSlicing"})),
        await claim_with(kube, kube_namespace, mps_a, mps_config(defaultActiveThreadPercentage=40)),
        await claim_with(kube, kube_namespace, mps_b, None),
    ]

    results = await prepare(refs)

    assert all(isinstance(results[r.uid], PreparedClaim) for r in refs), results
    envs = [env_of(tmp_path, r) for r in refs]
    assert envs[0] == envs[1] == {"NVIDIA_VISIBLE_DEVICES": uuid0}
    pipe = {"NVIDIA_VISIBLE_DEVICES": uuid1, "CUDA_MPS_PIPE_DIRECTORY": f"/mps/{MPS}/pipe"}
    assert envs[2] == {**pipe, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"}
    assert envs[3] == pipe


async def test_an_invalid_config_fails_its_claim_with_the_field_named(
    kube: AsyncClient, kube_namespace: str, gpu_class: str, tmp_path: Path
) -> None:
    _, inventory = node(tmp_path)
    (device, _), _ = replicas(inventory, MPS)
    ref = await claim_with(
        kube, kube_namespace, device, mps_config(defaultActiveThreadPercentage=150)
    )
    result = (await preparer(kube, tmp_path, inventory).prepare([ref]))[ref.uid]
    assert result == (
        "status.allocation.devices.config[0].opaque.parameters."
        "sharing.mpsConfig.defaultActiveThreadPercentage: must not be greater than 100"
    )
