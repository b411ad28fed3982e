"""The per-node switch, end to end: a node served by our DRA driver is relabelled
``device-plugin`` and then serves pods through our device plugin, with no device offered
through both APIs at any moment.

Real parts: the API server (slices, the Node and its label), both plugin processes
(NVIDIA, simulated), the kubelet emulator (registration, Allocate, PodResources) and
``accel-plugins migrate``. What the chart's DaemonSet controller does on a relabel, send
SIGTERM to the old mode's pod and start the new one's, is done here by hand.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from accel_plugins.kubelet import Kubelet
from accel_plugins.testing import short_tempdir
from tests.e2e.test_kubelet_admit_claims import (
    NVIDIA,
    TIMEOUT,
    kubeconfigs,
    published,
    read_until,
    spawn,
    stop,
)

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from tests.envtest import ApiServer

pytestmark = pytest.mark.timeout(180)
LABEL = "accel-plugins.io/kubelet-api"
GPU = "nvidia.com/gpu"
SWITCH = ["--kubelet-api-switch-label", LABEL, "--kubelet-api-default", "device-plugin"]


async def slice_devices(kube: AsyncClient, node: str) -> int:
    return sum(
        [
            len(s.spec.devices or [])
            async for s in kube.list(ResourceSlice, fields={"spec.nodeName": node})
        ]
    )


async def record_slices(kube: AsyncClient, node: str, seen: list[tuple[float, int]]) -> None:
    """Every change of the node's slices, as (monotonic time, devices in that slice)."""
    async for kind, item in kube.watch(ResourceSlice, fields={"spec.nodeName": node}):
        devices = 0 if kind == "DELETED" else len(item.spec.devices or [])
        seen.append((time.monotonic(), devices))


async def test_a_relabelled_node_moves_from_dra_to_the_device_plugin_never_both(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    kubelet: Kubelet,
    kubelet_dir: Path,
    tmp_path: Path,
) -> None:
    admin, as_node = kubeconfigs(tmp_path, kube_apiserver, kube_node)
    await kube.patch(
        Node, kube_node, {"metadata": {"labels": {LABEL: "dra"}}}, patch_type=PatchType.MERGE
    )
    assert kubelet.pod_resources_socket is not None
    slices: list[tuple[float, int]] = []
    recorder = asyncio.ensure_future(record_slices(kube, kube_node, slices))
    with short_tempdir("switch-") as root:
        common = [
            *NVIDIA.argv(tmp_path),
            "--node-name",
            kube_node,
            "--kubeconfig",
            str(as_node),
            "--kubelet-plugins-dir",
            str(root / "plugins"),
            "--plugin-dir",
            str(kubelet_dir),
            "--pod-resources-socket",
            str(kubelet.pod_resources_socket),
            "--log-format",
            "text",
            *SWITCH,
        ]
        driver = await spawn(
            *common,
            "--kubelet-api",
            "dra",
            "--plugins-registry-dir",
            str(root / "registry"),
            "--dra-cdi-spec-dir",
            str(root / "cdi"),
        )
        plugin = None
        try:
            # DRA mode: the PodResources API holds nothing and no device plugin socket is
            # live, so the driver publishes at once.
            found = await asyncio.wait_for(published(kube, kube_node, NVIDIA.driver), TIMEOUT)
            assert len(found.spec.devices or []) == 4
            assert GPU not in kubelet.resources

            # The device plugin started on the same node waits while the driver serves.
            plugin = await spawn(*common, "--kubelet-socket", str(kubelet.socket_path))
            waiting = await asyncio.wait_for(
                read_until(plugin, "waiting for the other mode"), TIMEOUT
            )
            assert f"{NVIDIA.driver} {root / 'plugins' / NVIDIA.driver / 'dra.sock'}" in waiting
            assert GPU not in kubelet.resources

            # The switch: the label moves, the DaemonSet controller stops the driver.
            migrate = await spawn(
                "migrate", kube_node, "--to", "device-plugin", "--kubeconfig", str(admin)
            )
            assert await asyncio.wait_for(migrate.wait(), TIMEOUT) == 0
            driver.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(driver.wait(), TIMEOUT) == 0

            view = await kubelet.wait_for_resource(GPU, allocatable=4, timeout=TIMEOUT)
            registered = time.monotonic()
            assert len(view.devices) == 4
            # Withdrawn before the driver's socket went, so before the plugin could start.
            assert await slice_devices(kube, kube_node) == 0

            record = await kubelet.allocate("trainer", "cuda", GPU, 1, namespace="ml")
            env = dict(record.response.envs)
            assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
            assert await slice_devices(kube, kube_node) == 0
        finally:
            recorder.cancel()
            for proc in (driver, plugin):
                if proc is not None:
                    await stop(proc)
    # Over time: slices had devices only before the device plugin registered.
    assert any(devices for _, devices in slices)
    assert all(at < registered for at, devices in slices if devices)
