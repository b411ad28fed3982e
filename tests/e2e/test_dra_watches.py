"""A node's DRA driver holds a fixed number of watches at the API server, none per claim.

Issue 31: with a watch per prepared claim, 12 prepared claims cost 12 long-lived
requests on every node. Counted where the cost is, at a real kube-apiserver of its
own (no scheduler, nothing else watching): its ``apiserver_longrunning_requests``
gauge, by resource, while the generic driver runs as a process and holds 12 prepared
claims (prepared by the conformance kit's kubelet and scheduler parts).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")


from accel_plugins.conformance.cluster import Allocated
from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.conformance.kubelet_side import KubeletSide
from accel_plugins.kubelet_emulator.dra import DraClaim
from tests.e2e.test_kubelet_admit_claims import stop
from tests.support.dra_envtest import generic_driver_env

DRIVER = "generic.accel-plugins.io"
NODE = "node-watches"
CLAIMS = 12
# The fake node's four accelerators, each shared three times: twelve devices.
COUNTED = """
devices:
  - name: accel
    groups:
      - paths: [{path: "/dev/accel*"}]
        count: 3
"""
ALLOWED = {"resourceslices", "nodes"}
pytestmark = pytest.mark.timeout(120)
Counts = dict[tuple[str, str], int]


def long_running(server: ApiServer) -> Counts:
    """(resource, verb) -> requests in flight now, from the API server's own /metrics."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(
        f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.admin_token}"}
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        text = answer.read().decode()
    found: Counts = {}
    for line in text.splitlines():
        if line.startswith("apiserver_longrunning_requests{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            key = (labels.get("resource", ""), labels.get("verb", ""))
            found[key] = found.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
    return found


def ours(now: Counts, before: Counts) -> dict[str, int]:
    """The watches added since ``before`` (the API server's own informers), by resource."""
    return {
        resource: count - before.get((resource, verb), 0)
        for (resource, verb), count in now.items()
        if verb == "WATCH" and count != before.get((resource, verb), 0)
    }


async def settled(server: ApiServer, before: Counts) -> dict[str, int]:
    """Our watches once the slices' is up (or after 20 s, what they are then)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while "resourceslices" not in (found := ours(long_running(server), before)):
        if loop.time() > deadline:
            break
        await asyncio.sleep(0.2)  # a gauge to poll: the API server sends no event for it
    return found


async def most(server: ApiServer, before: Counts, *, seconds: float) -> dict[str, int]:
    """The most watches of each resource seen over ``seconds`` of polling."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    peak: dict[str, int] = {}
    while loop.time() < deadline:
        for resource, count in ours(long_running(server), before).items():
            peak[resource] = max(peak.get(resource, 0), count)
        await asyncio.sleep(0.1)
    return peak


async def test_twelve_prepared_claims_hold_no_watch(tmp_path: Path) -> None:
    async with generic_driver_env(tmp_path, NODE, "watch-") as env:
        server, cluster, argv, root = env.server, env.cluster, env.argv, env.root
        (tmp_path / "generic.yaml").write_text(COUNTED)
        kubelet = KubeletSide(root / "registry", DRIVER)
        await kubelet.start()
        before = long_running(server)  # the API server's own loopback informers
        proc = await asyncio.create_subprocess_exec(*argv)
        try:
            await kubelet.wait_registered(0, 30)
            devices: list[dict[str, object]] = []
            while len(devices) < CLAIMS:
                await asyncio.sleep(0.1)  # no watch: the test must not add one
                devices = [d for s in await cluster.node_slices() for d in s["spec"]["devices"]]
            # The Node watch (the cordon annotation) may be in its backoff: on a fresh,
            # quiet API server the nodes watch cache can lag ("Too large resource
            # version", retried). Wait for the slices' watch; count the Node's if up.
            idle = await settled(server, before)
            refs = []
            for device in devices[:CLAIMS]:
                claim = await cluster.create_claim([cluster.exactly("r0")])
                name = str(device["name"])
                await cluster.allocate(claim, [Allocated("r0", DRIVER, NODE, name)])
                refs.append(DraClaim(claim.namespace, claim.name, claim.uid))
            answers = await kubelet.client().prepare(refs)
            assert [a.error for a in answers.values()] == [""] * CLAIMS
            busy = await most(server, before, seconds=1.0)
        finally:
            await stop(proc)
            await kubelet.stop()
    # Its slices (the publisher's, which repairs the kubelet's wipe) and at most its Node
    # (the cordon annotation): the same with 12 claims prepared as with none, and never a
    # claim. Before issue 31 the claims added 12 (one per prepared claim).
    for found in (idle, busy):
        assert found.get("resourceslices") == 1, found
        assert set(found) <= ALLOWED, found
        assert max(found.values()) == 1, found
