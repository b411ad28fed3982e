"""A rolling update with no gap: the new pod of the generic driver starts beside the old
one, the kubelet (emulated, with 1.33's several registrations per driver) prepares and
unprepares claims without a pause through whichever is newest, and the slices are never
deleted or written again while the pods hand over. Both pods are real processes with
their own pod UID against a real kube-apiserver.

Facts from the kubelet (pkg/kubelet/cm/dra/plugin, 1.33+): calls go to the newest
registration of a driver, and when it goes the one before serves again; a claim may be
prepared by one instance and unprepared by the other (manager.go picks the plugin per
call), which is why both pods share the checkpoint under ``serialize.lock``.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")


from accel_plugins.conformance.cluster import Allocated
from accel_plugins.conformance.kubelet_side import KubeletSide
from accel_plugins.kubelet_emulator.dra import DraClaim
from tests.e2e.test_kubelet_admit_claims import stop
from tests.support.dra_envtest import generic_driver_env
from tests.support.polling import until

DRIVER = "generic.accel-plugins.io"
NODE = "node-rolling"
OLD, NEW = "1a2b3c4d-0000-4000-8000-00000000000a", "1a2b3c4d-0000-4000-8000-00000000000b"
pytestmark = pytest.mark.timeout(120)


class Traffic:
    """The kubelet preparing and unpreparing claims back to back through the driver's
    newest registration, counting every claim that fails."""

    def __init__(self, kubelet: KubeletSide, claims: list[DraClaim]) -> None:
        self.kubelet = kubelet
        self.claims = claims
        self.rounds = 0
        self.failures: list[str] = []
        self.endpoints: set[str] = set()
        self._stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while not self._stop.is_set():
            client = self.kubelet.client()
            self.endpoints.add(client.endpoint.name)
            prepared = await client.prepare(self.claims, timeout=10)
            self.failures += [f"prepare {uid}: {r.error}" for uid, r in prepared.items() if r.error]
            # Through whichever registration is newest now: maybe the other pod.
            client = self.kubelet.client()
            self.endpoints.add(client.endpoint.name)
            unprepared = await client.unprepare(self.claims, timeout=10)
            self.failures += [f"unprepare {uid}: {e}" for uid, e in unprepared.items() if e]
            self.rounds += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._stop.set()

    def went_through(self, endpoint: str) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            self._raise_if_failed()
            return endpoint in self.endpoints

        return check

    def rounds_past(self, rounds: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            self._raise_if_failed()
            return self.rounds >= rounds

        return check

    def _raise_if_failed(self) -> None:
        if self.task is not None and self.task.done():
            self.task.result()  # the exception that stopped the traffic


def asked_by(plugin_dir: Path, uid: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        owner = plugin_dir / "slices.owner"
        return owner.exists() and owner.read_text().strip() == uid

    return check


async def test_a_new_pod_takes_over_with_no_failed_prepare_and_no_slice_rewritten(
    tmp_path: Path,
) -> None:
    async with generic_driver_env(tmp_path, NODE, "roll-") as env:
        cluster, argv, root = env.cluster, env.argv, env.root
        plugin_dir = root / "plugins" / DRIVER
        kubelet = KubeletSide(root / "registry", DRIVER)
        await kubelet.start()
        old = await asyncio.create_subprocess_exec(
            *argv, "--pod-uid", OLD, "--dra-rolling-update", "on"
        )
        new: asyncio.subprocess.Process | None = None
        try:
            await kubelet.wait_registered(0, 30)
            assert kubelet.client().endpoint == plugin_dir / f"dra-{OLD}.sock"
            before = await until(cluster.node_slices, "the old pod's slices")
            claims = []
            for device in [d for s in before for d in s["spec"]["devices"]][:2]:
                claim = await cluster.create_claim([cluster.exactly("r0")])
                await cluster.allocate(claim, [Allocated("r0", DRIVER, NODE, device["name"])])
                claims.append(DraClaim(claim.namespace, claim.name, claim.uid))
            traffic = Traffic(kubelet, claims)
            running = traffic.task = asyncio.create_task(traffic.run())
            # The slices as the old pod left them, right before the new pod starts.
            before = await cluster.node_slices()
            new = await asyncio.create_subprocess_exec(
                *argv, "--pod-uid", NEW, "--dra-rolling-update", "on"
            )
            await kubelet.wait_registered(1, 30)
            assert kubelet.client().endpoint == plugin_dir / f"dra-{NEW}.sock"
            await until(asked_by(plugin_dir, NEW), "the new pod asking for the turn")
            # The DaemonSet removes the old pod once the new one is available (ready,
            # so registered and answering): here, once a call went through the new one.
            await until(traffic.went_through(f"dra-{NEW}.sock"), "a call to the new pod")
            old.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(old.wait(), 20) == 0
            assert not (plugin_dir / f"dra-{OLD}.sock").exists()
            assert not (root / "registry" / f"{DRIVER}-{OLD}-reg.sock").exists()
            await until(traffic.rounds_past(traffic.rounds + 5), "five more rounds")
            traffic.stop()
            await running
            after = await cluster.node_slices()
            # Each round ended unprepared, through either pod: nothing left on the node.
            saved = json.loads((plugin_dir / "checkpoint.json").read_text())
            left = sorted(p.name for p in (root / "cdi").glob("*claim*"))
            # The new pod publishes now: a slice deleted behind its back comes back.
            await cluster.wipe_node_slices()
            await until(cluster.node_slices, "the slices written again by the new pod")
        finally:
            for proc in (old, new):
                if proc is not None:
                    await stop(proc)
            await kubelet.stop()
    assert traffic.failures == []
    assert (saved["claims"], left) == ({}, [])
    assert traffic.endpoints == {f"dra-{OLD}.sock", f"dra-{NEW}.sock"}
    # Not deleted, not re-created, not even written again: the same objects, same versions.
    assert [(s["metadata"]["uid"], s["metadata"]["resourceVersion"]) for s in after] == [
        (s["metadata"]["uid"], s["metadata"]["resourceVersion"]) for s in before
    ]
