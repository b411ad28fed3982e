"""One cordon against a real kube-apiserver (DRADeviceTaints on), in both modes.

``accel-plugins nvidia --simulate pcie-4gpu --kubelet-api dra`` runs as a process
and registers with the emulator's plugin watcher. The Node annotation
``accel-plugins.io/cordon`` (kubectl annotate, no shell on the node) and
``accel-plugins cordon`` (the state file) each put a NoSchedule taint on the
device in the node's ResourceSlice, with a Node Event; Prepare of a claim
allocated that device fails naming the cordon unless the claim tolerates the
taint; a restarted plugin keeps the file's cordon; removing both restores the
device. The taint's shape (key a label name, value a label value, effect
NoSchedule) is KEP-5055's, as kubernetes/kubernetes
pkg/apis/resource/validation/validation.go validates it. In device-plugin mode
the annotation makes the device Unhealthy in ListAndWatch and refused by Allocate.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaimStatus, ResourceSlice
from lightkube.types import PatchType

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.kubelet_emulator import Kubelet, PluginCallError
from accel_plugins.kubelet_emulator.dra import DraClaim
from accel_plugins.testing import short_tempdir
from tests.e2e.test_kubelet_admit_claims import (
    NVIDIA,
    allocated_claim,
    device_class,
    spawn,
    stop,
    write_kubeconfig,
)
from tests.fixtures.dra_kube import V1_34_TAINTS, ServerOf
from tests.reliability.plugin_process import Node as PluginNode
from tests.reliability.plugin_process import PluginProcesses, ready
from tests.support.cli import run_cli_async

DRIVER = "gpu.nvidia.com"
TIMEOUT = 30.0
ANNOTATION = "accel-plugins.io/cordon"
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def kube_apiserver(apiservers: ServerOf) -> ApiServer:
    return apiservers(V1_34_TAINTS)


async def taints(kube: AsyncClient, node: str) -> dict[str, list[tuple[str, str | None, str]]]:
    found: dict[str, list[tuple[str, str | None, str]]] = {}
    async for item in kube.list(ResourceSlice, fields={"spec.nodeName": node}):
        if item.spec.driver != DRIVER:
            continue
        for device in item.spec.devices or []:
            found[device.name] = [(t.key, t.value, t.effect) for t in device.taints or []]
    return found


async def until(check: Callable[[], Any], what: str) -> Any:
    """Poll the API server until ``check`` answers (not None); simpler than a watch of
    slices that are rewritten in place."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            answer = await check()
            if answer is not None:
                return answer
            await asyncio.sleep(0.1)
    raise AssertionError(what)  # pragma: no cover (the timeout raises first)


async def annotate(kube: AsyncClient, node: str, value: str | None) -> None:
    await kube.patch(
        Node,
        node,
        {"metadata": {"annotations": {ANNOTATION: value}}},
        patch_type=PatchType.MERGE,
    )


async def tolerating_allocation(
    kube: AsyncClient, namespace: str, name: str, node: str, device: str
) -> None:
    """Allocate ``device`` as the scheduler does for a claim tolerating the driver's
    unhealthy taint: the result carries the toleration (DeviceRequestAllocationResult)."""
    toleration = {"key": f"{DRIVER}/unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    result = {"request": "accel", "driver": DRIVER, "pool": node, "device": device}
    allocation = {
        "devices": {"results": [result | {"tolerations": [toleration]}]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    await kube.patch(
        ResourceClaimStatus,
        name,
        {"status": {"allocation": allocation}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )


async def test_cordon_by_annotation_and_by_command_in_dra_mode(
    kube: AsyncClient,
    kube_node: str,
    kube_apiserver: ApiServer,
    watching_kubelet: Kubelet,
    registry_dir: Path,
    tmp_path: Path,
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "admin.kubeconfig", kube_apiserver.kubeconfig())
    state = tmp_path / "state"
    unhealthy = [(f"{DRIVER}/unhealthy", "cordoned-fan-failing", "NoSchedule")]
    gpu_class = await device_class(kube, NVIDIA.selector)
    with short_tempdir("cordon-") as root:
        argv = [
            "nvidia",
            "--simulate",
            "pcie-4gpu",
            "--metrics-address",
            "",
            "--kubelet-api",
            "dra",
            "--node-name",
            kube_node,
            "--kubeconfig",
            str(kubeconfig),
            "--kubelet-plugins-dir",
            str(root / "plugins"),
            "--plugins-registry-dir",
            str(registry_dir),
            "--dra-cdi-spec-dir",
            str(root / "cdi"),
            "--dra-device-taints",
            "on",
            "--state-dir",
            str(state),
        ]
        plugin = await spawn(*argv, log=tmp_path / "plugin-1.log")
        try:
            await until(
                lambda: _has(taints(kube, kube_node), {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}),
                "the slices",
            )
            # kubectl annotate node N accel-plugins.io/cordon='gpu-1=fan failing'
            await annotate(kube, kube_node, "gpu-1=fan failing")
            found = await until(lambda: _tainted(taints(kube, kube_node), "gpu-1"), "gpu-1 tainted")
            assert found == {"gpu-1": unhealthy}

            # Prepare of a claim the scheduler would not have made (it did not tolerate
            # the taint) fails, naming the cordon.
            namespace = "default"
            name, uid = await allocated_claim(
                kube, namespace, gpu_class, kube_node, "gpu-1", driver=DRIVER
            )
            await watching_kubelet.wait_for(lambda k: DRIVER in k.dra.names, timeout=TIMEOUT)
            client = watching_kubelet.dra.client(DRIVER)
            result = (await client.prepare([DraClaim(namespace, name, uid)], timeout=TIMEOUT))[uid]
            assert result.error == (
                "device gpu-1 is unhealthy (cordoned: fan failing) and the claim does not "
                f"tolerate its taint {DRIVER}/unhealthy=cordoned-fan-failing:NoSchedule"
            )
            assert result.devices == ()
            # A claim that tolerates the taint (the scheduler only allocates a tainted device
            # to such a claim) is prepared: the cordon keeps new claims off, not these.
            name, uid = await allocated_claim(
                kube, namespace, gpu_class, kube_node, None, driver=DRIVER
            )
            await tolerating_allocation(kube, namespace, name, kube_node, "gpu-1")
            result = (await client.prepare([DraClaim(namespace, name, uid)], timeout=TIMEOUT))[uid]
            assert result.error == ""
            assert [d.device for d in result.devices] == ["gpu-1"]

            events = await until(lambda: _events(kube, kube_node), "a Node Event")
            assert any("cordoned: fan failing" in (e.message or "") for e in events)

            # The command on the node: kept in the state file across a restart.
            code, _, err = await run_cli_async(
                "cordon", "gpu-3", "--reason", "rma", "--state-dir", str(state)
            )
            assert code == 0, err
            await until(lambda: _tainted(taints(kube, kube_node), "gpu-3"), "gpu-3 tainted")
            plugin.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(plugin.wait(), TIMEOUT) == 0
            await annotate(kube, kube_node, None)  # meanwhile: the annotation is gone
            plugin = await spawn(*argv, log=tmp_path / "plugin-2.log")
            found = await until(
                lambda: _only_tainted(taints(kube, kube_node), {"gpu-3"}), "only gpu-3"
            )
            assert found["gpu-3"] == [(f"{DRIVER}/unhealthy", "cordoned-rma", "NoSchedule")]

            code, _, err = await run_cli_async("uncordon", "gpu-3", "--state-dir", str(state))
            assert code == 0, err
            await until(lambda: _only_tainted(taints(kube, kube_node), set()), "no taints")
            plugin.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(plugin.wait(), TIMEOUT) == 0
        finally:
            await stop(plugin)
            await kube.delete(DeviceClass, gpu_class)


async def _has(
    pending: Any, names: set[str]
) -> dict[str, list[tuple[str, str | None, str]]] | None:
    found: dict[str, list[tuple[str, str | None, str]]] = await pending
    return found if set(found) >= names else None


async def _tainted(pending: Any, name: str) -> dict[str, list[Any]] | None:
    found: dict[str, list[Any]] = await pending
    tainted = {d: t for d, t in found.items() if t}
    return tainted if name in tainted else None


async def _only_tainted(pending: Any, names: set[str]) -> dict[str, list[Any]] | None:
    found: dict[str, list[Any]] = await pending
    tainted = {d: t for d, t in found.items() if t}
    return tainted if found and set(tainted) == names else None


async def _events(kube: AsyncClient, node: str) -> list[Event] | None:
    found = [
        e
        async for e in kube.list(Event, namespace="default")
        if e.involvedObject.name == node and "cordoned" in (e.message or "")
    ]
    return found or None


async def test_device_plugin_mode_follows_the_annotation_too(
    kube: AsyncClient,
    kube_node: str,
    kube_apiserver: ApiServer,
    kubelet: Kubelet,
    kubelet_dir: Path,
    tmp_path: Path,
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "admin.kubeconfig", kube_apiserver.kubeconfig())
    resource = "nvidia.com/gpu"
    processes = PluginProcesses(kubelet_dir, tmp_path)
    argv = ["nvidia", "--simulate", "pcie-4gpu", "--metrics-address", ""]
    argv += ["--node-name", kube_node, "--kubeconfig", str(kubeconfig)]
    argv += ["--state-dir", str(tmp_path / "state")]
    node = PluginNode(argv, resource, 4)
    try:
        await processes.spawn(node)
        await kubelet.wait_for(ready(node), TIMEOUT)
        device = sorted(kubelet.resources[resource].devices)[2]  # by its ListAndWatch ID

        def unhealthy(ids: set[str]) -> Callable[[Kubelet], bool]:
            return lambda k: set(k.resources[resource].unhealthy) == ids

        await annotate(kube, kube_node, f"{device}=bad fan")
        await kubelet.wait_for(unhealthy({device}), TIMEOUT)
        with pytest.raises(PluginCallError, match=r"cordoned device IDs .* \(bad fan\)"):
            await kubelet.client(resource).allocate([[device]])
        await annotate(kube, kube_node, None)
        await kubelet.wait_for(unhealthy(set()), TIMEOUT)
    finally:
        await processes.stop_all()
