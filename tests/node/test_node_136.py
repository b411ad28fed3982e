"""What a Kubernetes v1.36 node changes for our DRA drivers, on a real v1.36 node.

The whole suite runs on v1.34; this module runs on a v1.36 node booted after it (the
``node_version`` mark, tests/node/conftest.py), with v1.36's default feature gates and no
others: there, what 1.34 leaves off is beta and on, and our drivers use it:

- consumable capacity (KEP-5075, ``DRAConsumableCapacity``): a shared device (here a
  generic device with squat's ``count: 2``) is published once with
  ``allowMultipleAllocations`` and a capacity ``shares``; two claims hold it together,
  each with its own share ID, prepared as a CDI device of its own, and a third waits;
- admin access (KEP-5018, GA): a claim in a namespace labelled for it gets the devices a
  workload holds, with ``DRA_ADMIN_ACCESS=true``; elsewhere the API server refuses it;
- extended resources backed by DRA (KEP-5004, ``DRAExtendedResource``): a pod asking for
  ``accel-plugins.io/accel-node: 1`` or ``nvidia.com/gpu: 1`` on a node without device
  plugins gets the device from our driver, through the chart's DeviceClass
  ``extendedResourceName``;
- device taints (KEP-5055, ``DRADeviceTaints``) and resource health in pod status
  (KEP-4680, ``ResourceHealthStatus``): an unplugged device stays in the slice, tainted
  ``NoSchedule`` with its reason, and the reason reaches the holder's
  ``status.containerStatuses[].allocatedResourcesStatus`` through the kubelet's health
  stream from our driver (on 1.34 the device leaves the slice instead:
  test_node_life.py);
- claim status (KEP-4817; on 1.36 written under ``resourceclaims/driver``'s
  associated-node verbs): a GPU claim's ``status.devices`` names the GPU its container got;
- the chart's admission policy (``dra.validateOpaqueParameters``) refuses a claim with a
  malformed ``GpuConfig`` when it is created, with Prepare's message.

The rest (device plugins, DRA's basics, metrics, node life) behaves the same on both and
runs on v1.34 only. Only the DRA release runs here: with no device plugin serving
``accel-plugins.io/accel-node`` on the node, the scheduler serves that extended resource
from DRA.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from accel_plugins.dra import claim_cdi
from accel_plugins.dra.claim_answer import ADMIN_ACCESS_ENV
from tests.node import dra, plugins
from tests.node.chart import Release
from tests.node.cluster import DEVICE_PREFIX, DEVICES, WORK, Node, unplugged
from tests.node.conftest import running_release
from tests.node.kubelet_state import prepared_devices
from tests.node.pods import (
    NAMESPACE,
    await_pod,
    pod,
    pod_log,
    seen_devices,
    seen_env,
    show_devices,
)
from tests.node.watch import watch_until

if TYPE_CHECKING:
    from lightkube import Client

pytestmark = pytest.mark.node_version("1.36")

# The generic devices of this node's release: accel-node over two of the suite's devices,
# accel-node-shared over the third, held by up to two containers at once (squat's count).
PLAIN = DEVICES[:2]
SHARED = DEVICES[2]
SHARES = 2
PLAIN_CLASS = dra.GENERIC_CLASS  # <name>.<domain>: accel-node.accel-plugins.io
SHARED_CLASS = f"{DEVICE_PREFIX}-shared.{plugins.DOMAIN}"
ADMIN_LABEL = "resource.kubernetes.io/admin-access"  # pkg/apis/resource: the namespace's label
TAINT_KEY = f"{dra.GENERIC_DRIVER}/unhealthy"  # docs/dra-slices.md: <driver>/unhealthy
NEW_POD_WITHIN = 90.0  # a pod that gets no device never runs: the bound ends the wait
REFUSED_WITHIN = 30.0  # a new admission policy takes effect once the API server has loaded it


def release_values(node: Node, nvidia_root: Path) -> dict[str, Any]:
    values = plugins.values(node, "dra", nvidia_root)
    values["generic"]["devices"] = [
        {"name": DEVICE_PREFIX, "groups": [{"paths": [{"path": str(d)}]} for d in PLAIN]},
        {
            "name": f"{DEVICE_PREFIX}-shared",
            "groups": [{"paths": [{"path": str(SHARED)}], "count": SHARES}],
        },
    ]
    return values


@pytest.fixture(scope="module")
def drivers(
    kube: Client, node: Node, project_images: list[str], nvidia_root: Path
) -> Iterator[Release]:
    """The chart in DRA mode, alone on the node; the shared device published once (three
    generic devices, not four copies)."""

    def ready() -> None:
        devices = {dra.GENERIC_DRIVER: len(DEVICES), dra.GPU_DRIVER: plugins.MOCK_GPUS}
        dra.await_slices(kube, node, devices)

    values = release_values(node, nvidia_root)
    with running_release(kube, node, "dra", "dra", ready, nvidia_root, values) as release:
        yield release


def test_the_node_runs_kubernetes_1_36_with_its_default_feature_gates(
    kube: Client, node: Node
) -> None:
    from lightkube.resources.core_v1 import Node as NodeObject

    got = kube.get(NodeObject, node.name)
    assert got.status is not None
    assert got.status.nodeInfo is not None
    assert got.status.nodeInfo.kubeletVersion.startswith("v1.36.")
    for daemon in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"):
        args = Path(f"/proc/{node.pid(daemon)}/cmdline").read_bytes().split(b"\0")
        assert not [a for a in args if a.startswith(b"--feature-gates")], daemon
    assert "featureGates" not in (WORK / "kubelet.yaml").read_text()


def test_two_claims_share_one_device_and_each_container_gets_its_own_share(
    kube: Client, node: Node, drivers: Release
) -> None:
    (shared,) = [d for d in slice_devices(kube, node) if d.allowMultipleAllocations]
    assert shared.to_dict()["capacity"]["shares"]["value"] == str(SHARES)
    with (
        dra.claim_template(kube, "share", SHARED_CLASS) as template,
        pod(kube, "share", show_devices(), claim_template=template) as first,
        pod(kube, "share", show_devices(), claim_template=template) as second,
    ):
        seen = [seen_devices(pod_log(kube, name)) for name in (first, second)]
        claims = [one_claim(kube, name) for name in (first, second)]
        prepared = [generic_devices_prepared(claim) for claim in claims]
        # Both shares are taken: a third claim of the device waits for one.
        with pod(
            kube, "share", show_devices(), claim_template=template, wait_running=False
        ) as third:
            await_pod(kube, third, unschedulable)
    assert seen == [{str(SHARED)}, {str(SHARED)}]
    results = [claim.status.allocation.devices.results for claim in claims]
    for (result,) in results:
        assert (result.device, result.consumedCapacity) == (shared.name, {"shares": "1"})
    share_ids = [result.shareID for (result,) in results]
    assert len(set(share_ids)) == 2, share_ids
    # What the kubelet recorded for each claim: the share our driver prepared, as a CDI
    # device of its own, which it handed that claim's container.
    for claim, share_id, devices in zip(claims, share_ids, prepared, strict=True):
        (device,) = devices
        assert (device.device, device.share_id) == (shared.name, share_id)
        cdi = claim_cdi.qualified_device(dra.GENERIC_DRIVER, claim.metadata.uid, "dev", share_id)
        assert device.cdi_device_ids == (cdi,)
    for claim in claims:
        dra.await_released(kube, claim, dra.GENERIC_DRIVER)


def test_an_admin_access_claim_sees_the_devices_a_workload_holds(
    kube: Client, drivers: Release
) -> None:
    from lightkube import ApiError

    with (
        dra.claim_template(kube, "work", PLAIN_CLASS) as work,
        pod(kube, "work", show_devices(), claim_template=work) as workload,
    ):
        (held,) = seen_devices(pod_log(kube, workload))
        work_claim = one_claim(kube, workload)
        running_as = container_id(kube, workload)
        # Refused by the API server outside a namespace labelled for admin access.
        with (
            pytest.raises(ApiError) as refused,
            dra.claim_template(kube, "peek", PLAIN_CLASS, **ADMIN_REQUEST),
        ):
            pass
        assert ADMIN_LABEL in str(refused.value.status.message)
        with (
            labelled_namespace(kube, "monitors") as monitors,
            dra.claim_template(
                kube, "monitor", PLAIN_CLASS, namespace=monitors, **ADMIN_REQUEST
            ) as template,
            pod(
                kube, "monitor", show_devices(), claim_template=template, namespace=monitors
            ) as monitor,
        ):
            log = pod_log(kube, monitor, monitors)
            claim = one_claim(kube, monitor, monitors)
            # The workload runs on with its device beside the monitor.
            assert container_id(kube, workload) == running_as
    assert held in seen_devices(log)
    assert seen_devices(log) == {str(d) for d in PLAIN}
    assert seen_env(log)[ADMIN_ACCESS_ENV] == "true"
    results = claim.status.allocation.devices.results
    assert len(results) == len(PLAIN)
    assert all(r.adminAccess for r in results)
    dra.await_released(kube, claim, dra.GENERIC_DRIVER)
    dra.await_released(kube, work_claim, dra.GENERIC_DRIVER)


@pytest.mark.parametrize(
    ("resource", "driver"),
    [(plugins.GENERIC_RESOURCE, dra.GENERIC_DRIVER), (plugins.GPU_RESOURCE, dra.GPU_DRIVER)],
    ids=["generic", "nvidia"],
)
def test_a_pod_asking_for_an_extended_resource_gets_it_from_our_driver(
    kube: Client, node: Node, drivers: Release, resource: str, driver: str
) -> None:
    from lightkube.resources.core_v1 import Pod
    from lightkube.resources.resource_v1 import ResourceClaim

    with pod(kube, "extended", show_devices(), limits={resource: "1"}) as name:
        log = pod_log(kube, name)
        got = kube.get(Pod, name, namespace=NAMESPACE)
        assert got.status is not None
        status = got.status.extendedResourceClaimStatus
        assert status is not None, f"no claim made for {resource}: {got.status}"
        claim = kube.get(ResourceClaim, status.resourceClaimName, namespace=NAMESPACE)
    assert [m.resourceName for m in status.requestMappings] == [resource]
    (allocated,) = dra.allocated_devices(claim)
    assert allocated.startswith(f"{driver}/{node.name}/")  # our pool: the node's name
    seen = seen_devices(log)
    if driver == dra.GENERIC_DRIVER:
        assert len(seen) == 1
        assert seen <= {str(d) for d in PLAIN}
    else:
        minor = allocated.rsplit("/gpu-", 1)[1]
        assert f"/dev/nvidia{minor}" in seen, seen
        assert seen_env(log)["NVIDIA_VISIBLE_DEVICES"] == "void"
    dra.await_released(kube, claim, driver)


def test_an_unplugged_device_is_tainted_and_its_reason_reaches_pod_status(
    kube: Client, node: Node, drivers: Release
) -> None:
    with (
        dra.claim_template(kube, "hold", PLAIN_CLASS) as template,
        pod(kube, "hold", show_devices(), claim_template=template) as holder,
    ):
        (gone,) = seen_devices(pod_log(kube, holder))
        claim = one_claim(kube, holder)
        (result,) = claim.status.allocation.devices.results
        (prepared,) = generic_devices_prepared(claim)
        (cdi,) = prepared.cdi_device_ids  # how the pod's status names the device
        running_as = container_id(kube, holder)
        await_health(kube, holder, cdi, "Healthy")
        with unplugged(gone):
            # It stays in the slice with a NoSchedule taint that says why.
            (taint,) = await_device(kube, node, result.device, lambda d: bool(d.taints)).taints
            assert (taint.key, taint.effect) == (TAINT_KEY, "NoSchedule")
            assert taint.value.startswith("node-vanished"), taint.value
            # The kubelet's health stream from our driver puts the reason in pod.status.
            message = await_health(kube, holder, cdi, "Unhealthy").message or ""
            assert message.startswith("node-vanished"), message
            assert gone in message
            # A new claim is allocated the other device; the holder runs on with its own.
            with pod(
                kube, "new", show_devices(), claim_template=template, within=NEW_POD_WITHIN
            ) as name:
                seen = seen_devices(pod_log(kube, name))
                new_claim = one_claim(kube, name)
            assert seen == {str(d) for d in PLAIN} - {gone}
            assert container_id(kube, holder) == running_as
        await_device(kube, node, result.device, lambda d: not d.taints)
        health = await_health(kube, holder, cdi, "Healthy")
        assert not health.message
        assert container_id(kube, holder) == running_as
    dra.await_released(kube, new_claim, dra.GENERIC_DRIVER)
    dra.await_released(kube, claim, dra.GENERIC_DRIVER)


def test_a_malformed_gpu_config_is_refused_when_the_claim_is_created(
    kube: Client, drivers: Release
) -> None:
    """The chart's policy (dra.validateOpaqueParameters) refuses the claim that Prepare
    would fail, with Prepare's message, before any pod waits on it."""
    from lightkube import ApiError
    from lightkube.codecs import from_dict

    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Sometimes"}},
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "malformed", "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": dra.GPU_CLASS}}],
                "config": [
                    {
                        "requests": ["gpu"],
                        "opaque": {"driver": dra.GPU_DRIVER, "parameters": parameters},
                    }
                ],
            }
        },
    }
    deadline = time.monotonic() + REFUSED_WITHIN
    while True:  # the policy is new to the API server: it answers once loaded (no event)
        try:
            kube.create(from_dict(claim), dry_run=True)
        except ApiError as exc:
            message = str(exc.status.message)
            break
        assert time.monotonic() < deadline, f"a claim with {parameters} was accepted"
        time.sleep(0.2)
    field = "spec.devices.config[0].opaque.parameters.sharing.timeSlicingConfig.interval"
    assert f"{field}: unknown time-slice interval 'Sometimes'" in message, message


def test_a_claims_status_names_the_gpu_its_container_got(
    kube: Client, node: Node, drivers: Release
) -> None:
    """Our driver writes each prepared device into the claim's status.devices (KEP-4817;
    on 1.36 under resourceclaims/driver's associated-node verbs, which the chart grants):
    the device, a Ready condition, and data naming it from the slice's attributes."""
    with (
        dra.claim_template(kube, "gpu", dra.GPU_CLASS) as template,
        pod(kube, "gpu", show_devices(), claim_template=template) as name,
    ):
        seen = seen_devices(pod_log(kube, name))
        claim = await_claim(kube, name, lambda got: bool(got.status.devices))
    (result,) = claim.status.allocation.devices.results
    (status,) = claim.to_dict()["status"]["devices"]
    assert (status["driver"], status["pool"], status["device"]) == (
        dra.GPU_DRIVER,
        node.name,
        result.device,
    )
    ((condition_type, ready),) = ((c["type"], c["status"]) for c in status["conditions"])
    assert (condition_type, ready) == ("Ready", "True")
    # The GPU the container got: its device node, and the UUID the slice publishes for it.
    assert f"/dev/nvidia{result.device.removeprefix('gpu-')}" in seen, seen
    uuid = slice_attributes(kube, node, dra.GPU_DRIVER, result.device)["uuid"]["string"]
    assert status["data"]["uuid"] == uuid
    dra.await_released(kube, claim, dra.GPU_DRIVER)


# -- helpers ---------------------------------------------------------------------------------

ADMIN_REQUEST: dict[str, Any] = {"adminAccess": True, "allocationMode": "All"}


def slice_devices(kube: Client, node: Node, driver: str = dra.GENERIC_DRIVER) -> list[Any]:
    """The driver's devices in the node's slices."""
    from lightkube.resources.resource_v1 import ResourceSlice

    return [
        device
        for item in kube.list(ResourceSlice, fields={"spec.nodeName": node.name})
        if item.spec.driver == driver
        for device in item.spec.devices or []
    ]


def slice_attributes(kube: Client, node: Node, driver: str, name: str) -> dict[str, Any]:
    (device,) = [d for d in slice_devices(kube, node, driver) if d.name == name]
    return dict(device.to_dict()["attributes"])


def await_claim(kube: Client, pod_name: str, done: Any) -> Any:
    """The pod's one claim once ``done(claim)`` (our driver writes its status in the
    background: Prepare never waits for the API server)."""
    from lightkube.resources.resource_v1 import ResourceClaim

    name = one_claim(kube, pod_name).metadata.name
    return watch_until(
        kube,
        ResourceClaim,
        lambda got: got.status is not None and done(got),
        namespace=NAMESPACE,
        fields={"metadata.name": name},
    )


def await_device(kube: Client, node: Node, name: str, done: Any) -> Any:
    """The generic driver's device ``name`` in the node's slices once ``done(device)``."""
    from lightkube.resources.resource_v1 import ResourceSlice

    def found(item: Any) -> Any:
        if item.spec.driver != dra.GENERIC_DRIVER:
            return None
        return next((d for d in item.spec.devices or [] if d.name == name and done(d)), None)

    got = watch_until(kube, ResourceSlice, found, fields={"spec.nodeName": node.name})
    return found(got)


def one_claim(kube: Client, pod_name: str, namespace: str = NAMESPACE) -> Any:
    (claim,) = dra.pod_claims(kube, pod_name, namespace)
    return claim


def generic_devices_prepared(claim: Any) -> list[Any]:
    """The generic driver's devices the kubelet recorded as prepared for the claim."""
    return [d for d in prepared_devices(claim.metadata.uid) if d.driver == dra.GENERIC_DRIVER]


def container_id(kube: Client, name: str) -> str:
    from lightkube.resources.core_v1 import Pod

    got = kube.get(Pod, name, namespace=NAMESPACE)
    assert got.status is not None
    (status,) = got.status.containerStatuses or []
    assert status.state is not None
    assert status.state.running is not None, status
    return str(status.containerID)


def unschedulable(got: Any) -> bool:
    conditions = got.status.conditions if got.status else None
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in conditions or []
    )


def health_of(got: Any) -> dict[str, tuple[str | None, str | None]]:
    """resourceID -> (health, message) from the pod's allocatedResourcesStatus (KEP-4680:
    per container, per claim and request, each device named by its CDI device ID)."""
    statuses = got.status.containerStatuses if got.status else None
    return {
        resource.resourceID: (resource.health, resource.message)
        for status in statuses or []
        for allocated in status.allocatedResourcesStatus or []
        if allocated.name.startswith("claim:")
        for resource in allocated.resources or []
    }


def await_health(kube: Client, name: str, resource_id: str, health: str) -> Any:
    """The ResourceHealth of ``resource_id`` in the pod's status once it says ``health``."""
    from lightkube.resources.core_v1 import Pod

    def said(got: Any) -> bool:
        return health_of(got).get(resource_id, (None, None))[0] == health

    got = watch_until(kube, Pod, said, namespace=NAMESPACE, fields={"metadata.name": name})
    for status in got.status.containerStatuses:
        for allocated in status.allocatedResourcesStatus or []:
            for resource in allocated.resources or []:
                if resource.resourceID == resource_id:
                    return resource
    raise AssertionError(f"{resource_id} left pod {name}'s status")


@contextlib.contextmanager
def labelled_namespace(kube: Client, name: str) -> Iterator[str]:
    """A namespace labelled for admin access, its default ServiceAccount made."""
    from lightkube.codecs import from_dict
    from lightkube.resources.core_v1 import Namespace, ServiceAccount

    metadata = {"name": name, "labels": {ADMIN_LABEL: "true"}}
    kube.create(from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}))
    try:
        # The controller manager makes it; a pod is refused until it is there.
        watch_until(kube, ServiceAccount, lambda _: True, namespace=name)
        yield name
    finally:
        with contextlib.suppress(Exception):
            kube.delete(Namespace, name)
