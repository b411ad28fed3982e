"""bench-fleet's scheduling phase: pods with claims per second through the real scheduler,
over our drivers' slices and over minimal slices of the same device count, in one run.

Each node gets a second pool beside ours, of a driver ``minimal.bench.example``: one
slice, as many devices, no attributes, capacities or counters. One DeviceClass selects
each driver. The same M pods (each with a claim for one device of its class) are created
for one class, then for the other, and the scheduler allocates and binds them (no kubelet
runs: binding is where its work ends). Throughput is M over the time from the first pod
created to the last one bound, pods created from several threads so that creating them is
not what is measured. Kubernetes' scheduler_perf measures its DRA cases the same way (its
test driver's slices, pods with claims from a template).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MINIMAL_DRIVER = "minimal.bench.example"
CREATORS = 8
BIND_TIMEOUT = 120.0

Call = Callable[..., bytes]  # bench-fleet's call(server, path, body=None)


def make_nodes_schedulable(call: Call, nodes: Sequence[str]) -> None:
    """Room for pods on each Node (no kubelet reports any), Ready and untainted."""
    status = {
        "status": {
            "capacity": {"pods": "500", "cpu": "64", "memory": "256Gi"},
            "allocatable": {"pods": "500", "cpu": "64", "memory": "256Gi"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Bench"}],
        }
    }
    for node in nodes:
        call(f"/api/v1/nodes/{node}/status", status, method="PATCH")
        # The TaintNodesByCondition admission taints a new Node not-ready; no node
        # lifecycle controller runs here to take it off.
        call(f"/api/v1/nodes/{node}", {"spec": {"taints": None}}, method="PATCH")


def publish_minimal(call: Call, nodes: Sequence[str], per_node: int) -> None:
    for node in nodes:
        call(
            "/apis/resource.k8s.io/v1/resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-minimal"},
                "spec": {
                    "driver": MINIMAL_DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"dev-{i}"} for i in range(per_node)],
                },
            },
        )


def _setup(call: Call, label: str, driver: str) -> str:
    namespace = f"bench-{label}"
    call(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    # No controller manager creates it here; the ServiceAccount admission wants it.
    call(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )
    call(
        "/apis/resource.k8s.io/v1/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": namespace},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    return namespace


def _claim(namespace: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{i}", "namespace": namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": namespace}}]}
        },
    }


def _pod(namespace: str, i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": namespace},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "main", "image": "bench", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"claim-{i}"}],
        },
    }


def bound(call: Call, namespace: str) -> int:
    path = f"/api/v1/namespaces/{namespace}/pods?fieldSelector=spec.nodeName%21%3D"
    return len(json.loads(call(path))["items"])


def throughput(call: Call, label: str, driver: str, pods: int) -> float:
    """Pods with claims bound per second, for ``pods`` pods of ``driver``'s class."""
    namespace = _setup(call, label, driver)
    claims = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    pod_path = f"/api/v1/namespaces/{namespace}/pods"
    with ThreadPoolExecutor(CREATORS) as pool:
        list(pool.map(lambda i: call(claims, _claim(namespace, i)), range(pods)))
        started = time.monotonic()
        list(pool.map(lambda i: call(pod_path, _pod(namespace, i)), range(pods)))
    while (done := bound(call, namespace)) < pods:
        if time.monotonic() - started > BIND_TIMEOUT:
            pod = json.loads(call(f"{pod_path}/pod-0"))
            raise RuntimeError(
                f"{done} of {pods} pods bound in {BIND_TIMEOUT:g} s ({label}); "
                f"pod-0: {pod.get('status')}"
            )
        time.sleep(0.2)
    return pods / (time.monotonic() - started)
