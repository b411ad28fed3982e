"""Issue 25's "done when", end to end: ``accel-plugins generic --kubelet-api dra`` as a
process against a real API server (DRADeviceTaints on). A /dev node that vanishes
shows, within 2 s, as a taint on its device in the node's ResourceSlice, as a
``DeviceUnhealthy`` Event on the Node and as a reason on ``/metrics``; when the
node is back all three clear (the taint gone, a ``DeviceHealthy`` Event, the
metric series gone).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event
from lightkube.resources.resource_v1 import ResourceSlice

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.testing import short_tempdir
from tests.e2e.test_kubelet_admit_cli import fake_node
from tests.fixtures.dra_kube import V1_34_TAINTS, ServerOf
from tests.support.cli import free_port, http_get
from tests.support.metrics import parse, series
from tests.support.polling import until

ROOT = Path(__file__).resolve().parents[2]
DRIVER = "generic.accel-plugins.io"
BOUND = 2.0  # seconds, the bound for all three channels
DEADLINE = 30.0  # how long a wait may take before the test gives up (not the bound)
REASON = "accel_plugins_device_health_reason"
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kube_apiserver(apiservers: ServerOf) -> ApiServer:
    return apiservers(V1_34_TAINTS)


def tainted(slices: list[ResourceSlice]) -> dict[str, list[tuple[str, str | None, str]]]:
    """Device name -> its taints (key, value, effect), for the devices that have any."""
    return {
        d.name: [(t.key, t.value, t.effect) for t in d.taints]
        for s in slices
        for d in s.spec.devices or []
        if d.taints
    }


async def node_slices(kube: AsyncClient, node: str) -> list[ResourceSlice]:
    return [
        s
        async for s in kube.list(
            ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER}
        )
    ]


async def node_event(kube: AsyncClient, node: str, reason: str) -> str:
    """The message of the newest Event ``reason`` on ``node``, or "" when there is none."""
    messages = [
        e.message or ""
        async for e in kube.list(Event, namespace="default", fields={"involvedObject.name": node})
        if e.reason == reason
    ]
    return messages[-1] if messages else ""


async def reasons(port: int) -> dict[tuple[str, str], float]:
    status, text = await http_get(port, "/metrics")
    assert status == 200
    return {
        (d["device"], d["kind"]): v
        for labels, v in series(parse(text), REASON).items()
        for d in [dict(labels)]
    }


async def test_a_vanished_device_is_tainted_reported_and_counted_within_2s_and_clears(
    tmp_path: Path, kube_apiserver: ApiServer, kube: AsyncClient, kube_node: str
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(kube_apiserver.kubeconfig()))
    port = free_port()
    argv = fake_node(tmp_path)
    host_dev = Path(argv[argv.index("--dev-root") + 1])
    with short_tempdir("drahealth-") as root:
        argv += [
            "--kubelet-api",
            "dra",
            "--node-name",
            kube_node,
            "--kubeconfig",
            str(kubeconfig),
            "--dra-device-taints",
            "on",
            "--kubelet-plugins-dir",
            str(root / "plugins"),
            "--plugins-registry-dir",
            str(root / "registry"),
            "--dra-cdi-spec-dir",
            str(root / "cdi"),
            "--metrics-address",
            f"127.0.0.1:{port}",
        ]
        log = tmp_path / "plugin.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "accel_plugins.cli.main",
                *argv,
                cwd=ROOT,
                stdout=out,
                stderr=out,
            )
        try:

            async def published() -> bool:
                devices = [
                    d for s in await node_slices(kube, kube_node) for d in s.spec.devices or []
                ]
                return len(devices) == 4 and not tainted(await node_slices(kube, kube_node))

            await until(published, "four untainted devices", DEADLINE)
            await until(lambda: http_get(port, "/healthz"), "metrics served", DEADLINE)

            node = host_dev / "accel1"
            saved = node.stat()
            start = time.monotonic()
            node.unlink()

            async def sick() -> Any:
                taints = tainted(await node_slices(kube, kube_node))
                event = await node_event(kube, kube_node, "DeviceUnhealthy")
                metric = await reasons(port)
                return (taints, event, metric) if taints and event and metric else None

            taints, event, metric = await until(sick, "taint, Event and metric", DEADLINE)
            took = time.monotonic() - start
            ((name, [(key, value, effect)]),) = taints.items()
            assert (key, effect) == (f"{DRIVER}/unhealthy", "NoSchedule")
            assert value is not None
            assert value.startswith("node-vanished")
            ((device, kind),) = metric
            assert kind == "node-vanished"
            assert device in event
            assert "node-vanished" in event
            assert took <= BOUND, f"the three channels took {took:.2f} s"

            # Back: the same node again (a hotplugged device returns with its numbers).
            os.mknod(node, saved.st_mode, saved.st_rdev)
            start = time.monotonic()

            async def well() -> bool:
                return (
                    not tainted(await node_slices(kube, kube_node))
                    and bool(await node_event(kube, kube_node, "DeviceHealthy"))
                    and not await reasons(port)
                )

            await until(well, "taint, metric gone and a DeviceHealthy Event", DEADLINE)
            assert name in {
                d.name for s in await node_slices(kube, kube_node) for d in s.spec.devices or []
            }
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 20) == 0, log.read_text()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
