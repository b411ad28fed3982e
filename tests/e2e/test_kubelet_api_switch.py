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
import contextlib
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.switch.probes import DraSide
from accel_plugins.switch.slices import AllSides, SliceSide
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
from tests.e2e.test_migrate import gpu_slice
from tests.support.cli import free_port, http_get

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from accel_plugins.conformance.envtest import ApiServer

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


async def record_slices(
    kube: AsyncClient, node: str, seen: list[tuple[float, int]], some: asyncio.Event
) -> None:
    """Every change of the node's slices, as (monotonic time, devices in that slice);
    ``some`` is set once a slice with devices was seen. A watch the API server ends
    (its cache behind the list's resourceVersion: "Too large resource version") is
    started again."""
    while True:
        with contextlib.suppress(ApiError):
            async for kind, item in kube.watch(ResourceSlice, fields={"spec.nodeName": node}):
                devices = 0 if kind == "DELETED" else len(item.spec.devices or [])
                seen.append((time.monotonic(), devices))
                if devices:
                    some.set()


def node_argv(
    tmp_path: Path, root: Path, node: str, as_node: Path, kubelet: Kubelet, kubelet_dir: Path
) -> list[str]:
    """The NVIDIA backend (simulated) on ``node`` with the switch on, either mode."""
    assert kubelet.pod_resources_socket is not None
    return [
        *NVIDIA.argv(tmp_path),
        "--node-name",
        node,
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


def dra_argv(root: Path) -> list[str]:
    return [
        "--kubelet-api",
        "dra",
        "--plugins-registry-dir",
        str(root / "registry"),
        "--dra-cdi-spec-dir",
        str(root / "cdi"),
    ]


async def probes_while_waiting(port: int, mode: str, blocker: str) -> None:
    """Alive, not ready, and saying why: the chart's liveness probe (/healthz) must not
    restart a plugin whose handover outlasts the probe's failure window (issue 31), and
    its readiness probe (/readyz) keeps it out of service until it serves."""
    status, body = await http_get(port, "/healthz")
    assert status == 200
    assert body.startswith("ok\n")
    assert f"waiting to serve as {mode}: the other mode still holds this node" in body
    status, body = await http_get(port, "/readyz")
    assert status == 503
    assert f"waiting to serve as {mode}" in body
    assert blocker in body


async def until_served(port: int) -> None:
    """Once the handover is over, neither probe speaks of it: from then on both report
    the plugin's own state (here: a driver no plugin watcher registers, so not ready)."""
    deadline = time.monotonic() + TIMEOUT
    while "waiting to serve" in (await http_get(port, "/readyz"))[1]:
        assert time.monotonic() < deadline, await http_get(port, "/readyz")
        await asyncio.sleep(0.1)  # no event: the probe is the kubelet's poll too
    assert "waiting to serve" not in (await http_get(port, "/healthz"))[1]


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
    some = asyncio.Event()
    recorder = asyncio.ensure_future(record_slices(kube, kube_node, slices, some))
    with short_tempdir("switch-") as root:
        common = node_argv(tmp_path, root, kube_node, as_node, kubelet, kubelet_dir)
        driver = await spawn(*common, *dra_argv(root))
        plugin = None
        try:
            # DRA mode: the PodResources API holds nothing and no device plugin socket is
            # live, so the driver publishes at once.
            found = await asyncio.wait_for(published(kube, kube_node, NVIDIA.driver), TIMEOUT)
            assert len(found.spec.devices or []) == 4
            await asyncio.wait_for(some.wait(), TIMEOUT)
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


async def test_a_relabelled_node_moves_from_the_device_plugin_to_dra_after_its_pods_end(
    kube: AsyncClient,
    kube_apiserver: ApiServer,
    kube_node: str,
    kubelet: Kubelet,
    kubelet_dir: Path,
    tmp_path: Path,
) -> None:
    admin, as_node = kubeconfigs(tmp_path, kube_apiserver, kube_node)
    slices: list[tuple[float, int]] = []
    some = asyncio.Event()
    recorder = asyncio.ensure_future(record_slices(kube, kube_node, slices, some))
    with short_tempdir("switch-") as root:
        common = node_argv(tmp_path, root, kube_node, as_node, kubelet, kubelet_dir)
        plugin = await spawn(*common, "--kubelet-socket", str(kubelet.socket_path))
        driver = None
        try:
            # Unlabelled: the default, device-plugin. A pod holds a GPU through it.
            await kubelet.wait_for_resource(GPU, allocatable=4, timeout=TIMEOUT)
            record = await kubelet.allocate("trainer", "cuda", GPU, 1, namespace="ml")
            held = record.device_ids[0]

            migrate = await spawn("migrate", kube_node, "--to", "dra", "--kubeconfig", str(admin))
            assert await asyncio.wait_for(migrate.wait(), TIMEOUT) == 0
            plugin.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(plugin.wait(), TIMEOUT) == 0
            assert not list(kubelet_dir.glob("nvidia.com_*.sock"))  # removed on stop

            # The driver waits: the kubelet still lists the pod's GPU (PodResources).
            port = free_port()
            metrics = ["--metrics-address", f"127.0.0.1:{port}"]
            driver = await spawn(*common, *dra_argv(root), *metrics)
            waiting = await asyncio.wait_for(
                read_until(driver, "waiting for the other mode"), TIMEOUT
            )
            assert f"ml/trainer: {GPU} {held}" in waiting
            assert await slice_devices(kube, kube_node) == 0
            await probes_while_waiting(port, "dra", f"ml/trainer: {GPU} {held}")

            kubelet.release("trainer", namespace="ml")  # the pod ended
            released = time.monotonic()
            await asyncio.wait_for(some.wait(), TIMEOUT)
            assert await slice_devices(kube, kube_node) == 4
            await until_served(port)
        finally:
            recorder.cancel()
            for proc in (plugin, driver):
                if proc is not None:
                    await stop(proc)
    # Over time: no slice had devices while the pod held its GPU through the device plugin.
    assert any(devices for _, devices in slices)
    assert all(at > released for at, devices in slices if devices)


async def test_sigterm_while_waiting_exits_cleanly_having_served_nothing(
    kubelet: Kubelet, kubelet_dir: Path, tmp_path: Path
) -> None:
    with short_tempdir("switch-") as root:
        driver_dir = root / "plugins" / NVIDIA.driver
        driver_dir.mkdir(parents=True)
        live_driver = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        live_driver.bind(str(driver_dir / "dra.sock"))  # a DRA driver still serving
        live_driver.listen()
        argv = node_argv(tmp_path, root, "node-x", tmp_path / "none", kubelet, kubelet_dir)
        port = free_port()
        metrics = ["--metrics-address", f"127.0.0.1:{port}"]
        plugin = await spawn(*argv, "--kubelet-socket", str(kubelet.socket_path), *metrics)
        try:
            await asyncio.wait_for(read_until(plugin, "waiting for the other mode"), TIMEOUT)
            # What blocks it: the DRA side it cannot read counts as advertising.
            await probes_while_waiting(port, "device-plugin", "still advertised")
            plugin.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(plugin.wait(), TIMEOUT) == 0
            assert GPU not in kubelet.resources
            assert not list(kubelet_dir.glob("nvidia.com_*.sock"))
        finally:
            live_driver.close()
            await stop(plugin)


async def test_a_killed_drivers_slices_count_as_advertising(
    kube: AsyncClient, kube_apiserver: ApiServer, kube_node: str, tmp_path: Path
) -> None:
    """No dra.sock is live after a SIGKILL, but the scheduler still allocates from the
    slices until they go: the device plugin's wait reads them too."""
    _, as_node = kubeconfigs(tmp_path, kube_apiserver, kube_node)
    with short_tempdir("switch-") as root:
        side = AllSides(
            [DraSide(root, NVIDIA.driver), SliceSide(kube_node, NVIDIA.driver, str(as_node))]
        )
        assert (await side.read()).clear
        left = gpu_slice(kube_node)
        await kube.create(left)
        found = await side.read()
        assert found.advertised == (f"ResourceSlice {kube_node}-gpu",)
        await kube.delete(ResourceSlice, f"{kube_node}-gpu")
        assert (await side.read()).clear
