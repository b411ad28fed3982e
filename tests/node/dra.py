"""DRA on the test node: the drivers' ResourceSlices, claim templates, claims."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.node.cluster import CDI_RUN_DIR, DEVICE_PREFIX, Node
from tests.node.files import await_removed
from tests.node.pods import NAMESPACE
from tests.node.watch import await_deleted, watch_until

if TYPE_CHECKING:
    from lightkube import Client

GENERIC_DRIVER = "generic.accel-plugins.io"  # the chart's generic.draDriverName
GPU_DRIVER = "gpu.nvidia.com"  # the chart's nvidia.draDriverName (NVIDIA's own)
# The chart's DeviceClasses (templates/dra-deviceclasses.yaml): gpu.nvidia.com as NVIDIA's
# DRA driver names it, and <device name>.<generic.domain> per generic device.
GENERIC_CLASS = f"{DEVICE_PREFIX}.accel-plugins.io"
GPU_CLASS = "gpu.nvidia.com"


def slice_devices(kube: Client, node: Node) -> Counter[str]:
    """Devices per driver in the node's ResourceSlices."""
    from lightkube.resources.resource_v1 import ResourceSlice

    counts: Counter[str] = Counter()
    for item in kube.list(ResourceSlice, fields={"spec.nodeName": node.name}):
        counts[item.spec.driver] += len(item.spec.devices or [])
    return counts


def await_slices(kube: Client, node: Node, expected: dict[str, int]) -> None:
    """Each driver's slices for the node list ``expected`` devices."""
    from lightkube.resources.resource_v1 import ResourceSlice

    watch_until(
        kube,
        ResourceSlice,
        lambda _: _has(slice_devices(kube, node), expected),
        fields={"spec.nodeName": node.name},
    )


def _has(counts: Counter[str], expected: dict[str, int]) -> bool:
    return all(counts[driver] == n for driver, n in expected.items())


@contextlib.contextmanager
def claim_template(
    kube: Client,
    name: str,
    device_class: str,
    count: int = 1,
    *,
    namespace: str = NAMESPACE,
    **exactly: Any,
) -> Iterator[str]:
    """A template of one request ``dev`` for ``count`` devices of ``device_class``
    (``exactly``: more of the request's fields, e.g. ``adminAccess``)."""
    from lightkube.codecs import from_dict
    from lightkube.resources.resource_v1 import ResourceClaimTemplate

    request: dict[str, Any] = {"deviceClassName": device_class, "count": count} | exactly
    if request.get("allocationMode") == "All":
        del request["count"]
    template: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": request}]}}},
    }
    kube.create(from_dict(template))
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            kube.delete(ResourceClaimTemplate, name, namespace=namespace)


def pod_claims(kube: Client, pod: str, namespace: str = NAMESPACE) -> list[Any]:
    """The ResourceClaims made for ``pod`` (from its templates, or by the scheduler for
    its extended resources)."""
    from lightkube.resources.resource_v1 import ResourceClaim

    return [
        claim
        for claim in kube.list(ResourceClaim, namespace=namespace)
        if claim.metadata is not None
        and any(ref.name == pod for ref in (claim.metadata.ownerReferences or []))
    ]


def claim_spec(claim: Any, driver: str) -> Path:
    """The CDI spec our driver writes for a prepared claim (accel_plugins/dra/claim_cdi.py)."""
    from accel_plugins.dra.claim_cdi import spec_file_name

    return CDI_RUN_DIR / spec_file_name(driver, claim.metadata.uid)


def await_released(kube: Client, claim: Any, driver: str) -> None:
    """The claim deleted with its pod and its CDI spec removed by our driver."""
    from lightkube.resources.resource_v1 import ResourceClaim

    spec = claim_spec(claim, driver)
    await_deleted(kube, ResourceClaim, claim.metadata.name, namespace=claim.metadata.namespace)
    assert await_removed(spec), f"{spec} outlived its claim"


def allocated_devices(claim: Any) -> list[str]:
    results = claim.status.allocation.devices.results if claim.status.allocation else []
    return [f"{r.driver}/{r.pool}/{r.device}" for r in results]
