"""DRA on a real kube-apiserver (loopback): slice update after a hotplug, claim read, and
claim prepare over the driver's socket beside the device-plugin path's admission
(bench_dra_prepare).

Needs ``KUBEBUILDER_ASSETS`` (etcd and kube-apiserver, as the tests do) and the ``[dra]``
extra; without them the section prints why and yields no rows.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import cast

from bench_dra_prepare import compared_rows
from benchlib import Row, percentile

from accel_plugins.plugin.device import Device, DeviceTree, tree

GOAL_MS = 100.0
DRIVER = "bench.example.com"
NODE = "node-0"


def _units(count: int) -> DeviceTree:
    return tree({"bench.example.com/dev": [Device(id=f"unit{i:03d}") for i in range(count)]})


async def bench_dra(args: argparse.Namespace, workdir: Path) -> list[Row]:
    from accel_plugins.conformance.envtest import EnvtestUnavailable, api_server, assets

    try:
        assets()
        from lightkube import KubeConfig
    except (EnvtestUnavailable, ImportError) as exc:
        print(f"dra: skipped ({exc})", file=sys.stderr)
        return []
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Node
    from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimStatus
    from lightkube.types import PatchType
    from prometheus_client import CollectorRegistry

    from accel_plugins.dra.kube import KubeClaimSource, KubeSlicePublisher, make_client
    from accel_plugins.dra.model import ClaimRef
    from accel_plugins.kubelet_emulator.dra import DraClaim

    rounds = 20 if args.quick else 100
    with api_server() as server:
        admin = make_client(KubeConfig.from_dict(server.kubeconfig()))
        node = make_client(KubeConfig.from_dict(server.node_kubeconfig(NODE)))
        try:
            await admin.create(Node(metadata=ObjectMeta(name=NODE)))
            publisher = KubeSlicePublisher(
                node, driver=DRIVER, node=NODE, registry=CollectorRegistry()
            )
            await publisher.publish(_units(64))
            updates: list[float] = []
            for i in range(rounds):
                # A device plugged in, then pulled out: one slice rewritten each time.
                start = time.perf_counter()
                await publisher.publish(_units(65 if i % 2 == 0 else 64))
                updates.append((time.perf_counter() - start) * 1000)

            claim = await admin.create(
                cast(
                    ResourceClaim,
                    ResourceClaim.from_dict(
                        {
                            "metadata": {"name": "bench", "namespace": "default"},
                            "spec": {
                                "devices": {
                                    "requests": [
                                        {"name": "dev", "exactly": {"deviceClassName": "bench"}}
                                    ]
                                }
                            },
                        }
                    ),
                )
            )
            # u0: a device of the backend the prepare benchmark serves (bench_admission.Fixed).
            result = {"request": "dev", "driver": DRIVER, "pool": NODE, "device": "u0"}
            status = {"status": {"allocation": {"devices": {"results": [result]}}}}
            await admin.patch(
                ResourceClaimStatus,
                "bench",
                status,
                namespace="default",
                patch_type=PatchType.MERGE,
            )
            assert claim.metadata is not None
            assert claim.metadata.uid is not None
            ref = ClaimRef(uid=claim.metadata.uid, namespace="default", name="bench")
            source = KubeClaimSource(admin)  # every resolve a GET
            reads: list[float] = []
            for _ in range(rounds):
                start = time.perf_counter()
                await source.resolve(ref, DRIVER, NODE)
                reads.append((time.perf_counter() - start) * 1000)
            # The admin identity reads the claim: a node's would need a pod bound to it
            # (the Node authorizer); the API read costs the same.
            compared = await compared_rows(
                source,
                DraClaim(namespace="default", name="bench", uid=claim.metadata.uid),
                driver=DRIVER,
                node=NODE,
                workdir=workdir,
                rounds=rounds,
            )
        finally:
            await node.close()
            await admin.close()
    p50, p99 = percentile(updates, 50), percentile(updates, 99)
    return [
        Row("DRA slice update after hotplug p50", p50, "ms", f"<= {GOAL_MS:.0f}", p50 <= GOAL_MS),
        Row("DRA slice update after hotplug p99", p99, "ms", f"<= {GOAL_MS:.0f}", p99 <= GOAL_MS),
        Row("DRA claim read (API GET) p50", percentile(reads, 50), "ms", "", None),
        Row("DRA claim read (API GET) p99", percentile(reads, 99), "ms", "", None),
        *compared,
    ]
