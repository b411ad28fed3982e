"""A GPU and an RDMA NIC under one PCIe root, allocated by the real kube-scheduler.

The worked example of docs/dra.md ("GPU and NIC under one PCIe root"), whose YAML
this test reads from examples/dra/: one node, two of our DRA drivers publishing its
ResourceSlices, and a claim for one GPU and one NIC with
``matchAttribute: resource.kubernetes.io/pcieRoot`` across the two requests.

- NVIDIA (``gpu.nvidia.com``): the simulated ``pcie-4gpu`` node, GPUs 0000:21 and
  0000:41 under the root complex pci0000:00, 0000:a1 and 0000:c1 under pci0000:80.
- generic (``generic.accel-plugins.io``, examples/dra/rdma-nics.yaml): RDMA NICs
  /dev/infiniband/uverbs0 on 0000:a2 under pci0000:80, uverbs1 on 0001:01 alone
  under pci0001:00.

The drivers are wired as ``--kubelet-api dra`` wires them, in this process
(tests/support/dra_in_process.py): the NVIDIA backend's sysfs root, where it reads the
GPUs' roots, cannot be pointed at a fake tree from the command line. The scheduler
pairs a GPU of pci0000:80 with uverbs0; the same claim again finds no free NIC on a
free GPU's root and its pod stays Pending ("cannot allocate all claims"), while the
claim without the constraint still fits (the refusal is the constraint's).
Skips without ``kube-scheduler`` in ``$KUBEBUILDER_ASSETS`` or without CAP_MKNOD.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod, ServiceAccount
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim, ResourceSlice

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.conformance.envtest import ApiServer, scheduler_missing
from accel_plugins.plugin.dra_attributes import PCIE_ROOT
from accel_plugins.testing import short_tempdir
from tests.e2e.test_dra_kube_slices import attrs
from tests.e2e.test_dra_scheduler import schedulable
from tests.fixtures.dra_kube import NodeClient
from tests.fixtures.generic import FakeHost
from tests.fixtures.nvidia import simulated_backend
from tests.support.dra_in_process import dra_driver
from tests.support.pci_topology import Function, add_function, add_rdma_nic
from tests.support.polling import until
from tests.support.repo import ROOT

EXAMPLE = ROOT / "examples" / "dra"
GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "generic.accel-plugins.io"
# As charts/accel-plugins/templates/dra-deviceclasses.yaml renders NVIDIA's class.
GPU_SELECTOR = f'device.driver == "{GPU_DRIVER}" && device.attributes["{GPU_DRIVER}"].type == "gpu"'
GPU_CLASS: dict[str, Any] = {
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": GPU_SELECTOR}}]},
}
GPUS = (  # pcie-4gpu's bus IDs and NUMA nodes
    Function("pci0000:00/0000:00:01.1/0000:21:00.0", 0),
    Function("pci0000:00/0000:00:03.1/0000:41:00.0", 0),
    Function("pci0000:80/0000:80:01.1/0000:a1:00.0", 1),
    Function("pci0000:80/0000:80:03.1/0000:c1:00.0", 1),
)
NICS = (
    Function("pci0000:80/0000:80:01.2/0000:a2:00.0", 1),
    Function("pci0001:00/0001:00:01.0/0001:01:00.0", 0),
)
TIMEOUT = 30.0
pytestmark = pytest.mark.timeout(120)

Attributes = dict[tuple[str, str], dict[str, object]]  # (driver, device) -> its attributes


def example() -> dict[str, dict[str, Any]]:
    """The claim example's objects by kind."""
    text = (EXAMPLE / "gpu-and-nic.yaml").read_text()
    found: dict[str, dict[str, Any]] = {d["kind"]: d for d in yaml.safe_load_all(text)}
    return found


def test_the_docs_show_the_examples_files() -> None:
    """docs/dra.md shows both files as they are, so the docs cannot drift from this test."""
    docs = (ROOT / "docs" / "dra.md").read_text()
    for name in ("gpu-and-nic.yaml", "rdma-nics.yaml"):
        assert f"```yaml\n{(EXAMPLE / name).read_text()}```" in docs, name


async def published(kube: AsyncClient, node: str) -> Attributes:
    """Every device of the node's slices once both drivers' are there, all of them."""

    async def found() -> Attributes:
        out: Attributes = {}
        async for item in kube.list(ResourceSlice, fields={"spec.nodeName": node}):
            for device in item.spec.devices or []:
                out[(item.spec.driver, device.name)] = attrs(device)
        drivers = [driver for driver, _ in out]
        return out if (drivers.count(GPU_DRIVER), drivers.count(NIC_DRIVER)) == (4, 2) else {}

    return await until(found, "4 GPUs and 2 NICs published", TIMEOUT)


def pinned(document: dict[str, Any], node: str, suffix: str) -> dict[str, Any]:
    """The example's Pod, renamed, claiming ``gpu-and-nic<suffix>``, held to ``node`` (the
    session's API server has other tests' Nodes)."""
    pod = copy.deepcopy(document)
    pod["metadata"]["name"] += suffix
    pod["spec"]["resourceClaims"][0]["resourceClaimName"] += suffix
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    pod["spec"]["affinity"] = {"nodeAffinity": required}
    return pod


async def submit(
    kube: AsyncClient, namespace: str, node: str, suffix: str, *, constrained: bool = True
) -> str:
    """The example's claim and pod (named with ``suffix``); the pod's name."""
    objects = example()
    claim = copy.deepcopy(objects["ResourceClaim"])
    claim["metadata"] |= {"name": claim["metadata"]["name"] + suffix, "namespace": namespace}
    if not constrained:
        del claim["spec"]["devices"]["constraints"]
    await kube.create(cast(ResourceClaim, ResourceClaim.from_dict(claim)))
    pod = pinned(objects["Pod"], node, suffix)
    pod["metadata"]["namespace"] = namespace
    await kube.create(cast(Pod, Pod.from_dict(pod)))
    return str(pod["metadata"]["name"])


async def bound(kube: AsyncClient, namespace: str, pod: str) -> str:
    async def node() -> str:
        found = await kube.get(Pod, pod, namespace=namespace)
        return (found.spec.nodeName or "") if found.spec is not None else ""

    return await until(node, f"pod {pod} bound", TIMEOUT)


async def unschedulable(kube: AsyncClient, namespace: str, pod: str) -> str:
    """The scheduler's PodScheduled=False message once it has given up on ``pod``."""

    async def message() -> str:
        found = await kube.get(Pod, pod, namespace=namespace)
        conditions = (found.status.conditions or []) if found.status is not None else []
        for c in conditions:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c.message or "?"
        return ""

    return await until(message, f"pod {pod} found unschedulable", TIMEOUT)


async def allocation(kube: AsyncClient, namespace: str, claim: str) -> dict[str, tuple[str, str]]:
    """Request -> (driver, device) of the claim's allocation ({} while unallocated)."""
    found = await kube.get(ResourceClaim, claim, namespace=namespace)
    status = found.status
    if status is None or status.allocation is None or status.allocation.devices is None:
        return {}
    return {r.request: (r.driver, r.device) for r in status.allocation.devices.results or []}


@contextlib.asynccontextmanager
async def device_classes(kube: AsyncClient) -> AsyncIterator[None]:
    """The example's NIC class, and NVIDIA's as the chart makes it unless a test made it."""
    made = []
    documents: list[dict[str, Any]] = [example()["DeviceClass"], GPU_CLASS]
    for document in documents:
        try:
            await kube.create(cast(DeviceClass, DeviceClass.from_dict(document)))
            made.append(document["metadata"]["name"])
        except ApiError as exc:
            if exc.status.code != 409:
                raise
    try:
        yield
    finally:
        for name in made:
            await kube.delete(DeviceClass, name)


def simulated_node(host: FakeHost) -> tuple[NvidiaBackend, GenericBackend]:
    """The NVIDIA and generic backends of the node, over ``host``'s /dev and sysfs."""
    for function in GPUS:
        add_function(host, function)
    for index, function in enumerate(NICS):
        add_rdma_nic(host, index, function)
    gpus, _ = simulated_backend("pcie-4gpu")
    gpus.sys_root = host.sys  # where the GPUs' roots are read (/sys on a node)
    config = parse_config((EXAMPLE / "rdma-nics.yaml").read_text())
    return gpus, GenericBackend(config, host.settings())


@contextlib.asynccontextmanager
async def pods_deleted(kube: AsyncClient, namespace: str, names: list[str]) -> AsyncIterator[None]:
    """Gone afterwards, whatever happened (a Pending one would keep the scheduler busy)."""
    try:
        yield
    finally:
        for name in names:
            with contextlib.suppress(ApiError):
                await kube.delete(Pod, name, namespace=namespace, grace_period=0)


async def aligned_then_refused(
    kube: AsyncClient,
    namespace: str,
    node: str,
    roots: dict[tuple[str, str], str],
    uverbs0: tuple[str, str],
    uverbs1: tuple[str, str],
) -> None:
    # The matching pair: a GPU of pci0000:80 and uverbs0, the NIC on that root.
    assert await bound(kube, namespace, await submit(kube, namespace, node, "")) == node
    first = await allocation(kube, namespace, "gpu-and-nic")
    assert first["nic"] == uverbs0
    assert first["gpu"][0] == GPU_DRIVER
    assert roots[first["gpu"]] == roots[first["nic"]] == "pci0000:80"

    # Again: the free GPUs' roots (pci0000:00, pci0000:80) hold no free NIC.
    second = await submit(kube, namespace, node, "-2")
    assert "cannot allocate all claims" in await unschedulable(kube, namespace, second)
    assert await allocation(kube, namespace, "gpu-and-nic-2") == {}

    # Without the constraint the same devices fit: the refusal was the constraint's.
    third = await submit(kube, namespace, node, "-3", constrained=False)
    assert await bound(kube, namespace, third) == node
    unaligned = await allocation(kube, namespace, "gpu-and-nic-3")
    assert unaligned["nic"] == uverbs1
    assert roots[unaligned["gpu"]] != roots[uverbs1]
    pending = await kube.get(Pod, second, namespace=namespace)
    assert pending.spec is not None
    assert pending.spec.nodeName is None  # still Pending


async def test_the_scheduler_pairs_a_gpu_and_a_nic_under_one_pcie_root(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    node_client: NodeClient,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    if not kube_apiserver.scheduler:
        pytest.skip(f"no kube-scheduler: {scheduler_missing()}")
    node, namespace = kube_node, kube_namespace
    gpus, nics = simulated_node(FakeHost(tmp_path / "host"))
    await schedulable(kube, node)
    await kube.create(ServiceAccount(metadata=ObjectMeta(name="default", namespace=namespace)))
    with short_tempdir("pcie-") as root:
        async with (
            dra_driver(gpus, driver=GPU_DRIVER, node=node, client=node_client(node), root=root),
            dra_driver(nics, driver=NIC_DRIVER, node=node, client=node_client(node), root=root),
            device_classes(kube),
        ):
            devices = await published(kube, node)
            roots = {key: str(value.get(PCIE_ROOT)) for key, value in devices.items()}
            paths = {value.get("path"): key for key, value in devices.items()}
            assert sorted(r for (d, _), r in roots.items() if d == GPU_DRIVER) == [
                "pci0000:00", "pci0000:00", "pci0000:80", "pci0000:80"
            ]  # fmt: skip
            uverbs0, uverbs1 = paths["/dev/infiniband/uverbs0"], paths["/dev/infiniband/uverbs1"]
            assert (roots[uverbs0], roots[uverbs1]) == ("pci0000:80", "pci0001:00")

            async with pods_deleted(kube, namespace, ["trainer", "trainer-2", "trainer-3"]):
                await aligned_then_refused(kube, namespace, node, roots, uverbs0, uverbs1)
