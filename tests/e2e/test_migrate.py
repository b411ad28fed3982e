"""``accel-plugins migrate``: labels a node and reports the move, against a real API server.

The command runs as its own process (as an operator runs it); the objects it reads are
made through the API as the scheduler, the kubelet and our driver would make them.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, NodeStatus, Pod, ServiceAccount
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice
from lightkube.types import PatchType

from accel_plugins.switch.migrate import EXIT_API, EXIT_NO_NODE, EXIT_OK, EXIT_TIMEOUT
from tests.e2e.test_kubelet_admit_claims import (
    TIMEOUT,
    allocated_claim,
    read_until,
    spawn,
    stop,
    write_kubeconfig,
)

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from accel_plugins.conformance.envtest import ApiServer

pytestmark = pytest.mark.timeout(120)
LABEL = "accel-plugins.io/kubelet-api"


async def run(*argv: str) -> tuple[int, str]:
    proc = await spawn("migrate", *argv)
    try:
        out = (await asyncio.wait_for(proc.communicate(), TIMEOUT))[0].decode()
    finally:
        await stop(proc)
    assert proc.returncode is not None
    return proc.returncode, out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("case", "code", "says"),
    [
        pytest.param("no-node", EXIT_NO_NODE, "no node 'nowhere'", id="no-such-node"),
        pytest.param("unreachable", EXIT_API, "cannot reach the API server", id="no-api-access"),
    ],
)
async def test_errors_are_clear_and_non_zero(
    kube_apiserver: ApiServer, tmp_path: Path, case: str, code: int, says: str
) -> None:
    config = kube_apiserver.kubeconfig()
    if case == "unreachable":
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{_closed_port()}"
    kubeconfig = write_kubeconfig(tmp_path / "admin.kubeconfig", config)
    returncode, out = await run("nowhere", "--to", "dra", "--kubeconfig", str(kubeconfig))
    assert returncode == code
    assert says in out


def gpu_pod(namespace: str, node: str) -> Pod:
    container = {"name": "cuda", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    document = {
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {"nodeName": node, "containers": [container]},
    }
    return cast("Pod", Pod.from_dict(document))


def gpu_slice(node: str) -> ResourceSlice:
    document: dict[str, Any] = {
        "metadata": {"name": f"{node}-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
        },
    }
    return cast("ResourceSlice", ResourceSlice.from_dict(document))


async def test_to_dra_waits_for_the_device_plugins_pods_and_the_drivers_slices(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "admin.kubeconfig", kube_apiserver.kubeconfig())
    await kube.create(ServiceAccount(metadata=ObjectMeta(name="default", namespace=kube_namespace)))
    await kube.create(gpu_pod(kube_namespace, kube_node))
    proc = await spawn(
        "migrate", kube_node, "--to", "dra", "--wait", "--kubeconfig", str(kubeconfig)
    )
    try:
        out = await asyncio.wait_for(read_until(proc, "waiting:"), TIMEOUT)
        assert f"node {kube_node}: {LABEL}=dra (was unset)" in out
        assert (
            f"1 held through the device plugin: {kube_namespace}/trainer (nvidia.com/gpu 2)" in out
        )
        assert "0 device(s) published through DRA" in out
        node = await kube.get(Node, kube_node)
        assert node.metadata is not None
        assert (node.metadata.labels or {})[LABEL] == "dra"

        await kube.delete(Pod, "trainer", namespace=kube_namespace, grace_period=0)
        await kube.create(gpu_slice(kube_node))
        out = await asyncio.wait_for(read_until(proc, "done:"), TIMEOUT)
        assert "0 held through the device plugin; 2 device(s) published through DRA" in out
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == EXIT_OK
    finally:
        await stop(proc)
        await kube.delete(ResourceSlice, f"{kube_node}-gpu")


async def test_to_device_plugin_waits_for_claims_and_allocatable(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    kube_namespace: str,
    tmp_path: Path,
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "admin.kubeconfig", kube_apiserver.kubeconfig())
    claim, _ = await allocated_claim(
        kube, kube_namespace, "gpu.nvidia.com", kube_node, "gpu-0", "gpu.nvidia.com"
    )
    argv = [
        "migrate",
        kube_node,
        "--to",
        "device-plugin",
        "--wait",
        "--kubeconfig",
        str(kubeconfig),
    ]
    code, out = await run(*argv[1:], "--timeout", "0")
    assert code == EXIT_TIMEOUT
    assert f"1 held through DRA: {kube_namespace}/{claim} (pods no pod)" in out
    assert "not done after 0 s" in out

    proc = await spawn(*argv)
    try:
        await asyncio.wait_for(read_until(proc, "waiting:"), TIMEOUT)
        await kube.delete(ResourceClaim, claim, namespace=kube_namespace)
        room = {"nvidia.com/gpu": "4", "pods": "10"}
        status = {"status": {"capacity": room, "allocatable": room}}
        await kube.patch(NodeStatus, kube_node, status, patch_type=PatchType.MERGE)
        out = await asyncio.wait_for(read_until(proc, "done:"), TIMEOUT)
        assert "0 held through DRA; 4 device(s) published through the device plugin" in out
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == EXIT_OK
    finally:
        await stop(proc)
