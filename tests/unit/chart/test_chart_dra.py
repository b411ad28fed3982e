"""kubeletApi: dra: the DRA DaemonSets, their ServiceAccount and least-privilege RBAC, and
the DeviceClasses; the device-plugin mode renders none of it. The last tests apply the
rendered RBAC and DeviceClasses to a real kube-apiserver (CEL compiled at create time) and
act as the ServiceAccount."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

import pytest

from tests.support.chart import (
    NAMESPACE,
    RELEASE,
    Obj,
    ci_values,
    container,
    daemonset,
    helm_sdk,
    mounts,
    of_kind,
    render,
)

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from accel_plugins.conformance.envtest import ApiServer

PLUGINS = "/var/lib/kubelet/plugins"
REGISTRY = "/var/lib/kubelet/plugins_registry"
CDI = "/var/run/cdi"
ACCOUNT = f"{RELEASE}-accel-plugins-dra"
DRA_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
POLICY = f"{ACCOUNT}-node-slices"


@pytest.fixture(autouse=True)
def _helm() -> None:
    helm_sdk()


@pytest.mark.parametrize(
    ("backend", "driver"),
    [
        pytest.param("nvidia", "gpu.nvidia.com", id="nvidia"),
        pytest.param("generic", "generic.accel-plugins.io", id="generic"),
    ],
)
def test_dra_daemonsets_run_the_driver(backend: str, driver: str) -> None:
    ds = daemonset(render(ci_values("dra")), backend)
    spec = ds["spec"]["template"]["spec"]
    plugin = container(ds)
    args = plugin["args"]
    for flag in (
        "--kubelet-api=dra",
        f"--dra-driver-name={driver}",
        f"--kubelet-plugins-dir={PLUGINS}",
        f"--dra-cdi-spec-dir={CDI}",
    ):
        assert flag in args
    assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == (ACCOUNT, True)
    env = {e["name"]: e for e in plugin["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["ACCEL_PLUGINS_PLUGINS_REGISTRY_DIR"]["value"] == REGISTRY
    found = mounts(ds)
    for path in (PLUGINS, REGISTRY, CDI):
        _, read_only, volume = found[path]
        assert not read_only
        assert volume["hostPath"] == {"path": path, "type": "DirectoryOrCreate"}
    # Nothing of the device-plugin API: no device-plugins socket dir, no pod resources.
    assert "/var/lib/kubelet/device-plugins" not in found
    assert "/var/lib/kubelet/pod-resources" not in found
    # A DRA driver serves /metrics and /healthz (503 until the kubelet registered it),
    # as a device plugin does: the same port, probe and Service.
    assert plugin["ports"] == [{"name": "metrics", "containerPort": 9478, "protocol": "TCP"}]
    assert plugin["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert plugin["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert {"name": "ACCEL_PLUGINS_METRICS_ADDRESS", "value": ":9478"} in plugin["env"]
    # A rollout with no gap (docs/dra.md "Upgrades with no gap"): the new pod serves beside
    # the old one, its sockets named after its UID where the kubelet is 1.33+.
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert "--dra-rolling-update=auto" in args


def test_device_plugin_daemonsets_keep_their_strategy_and_no_pod_uid() -> None:
    for backend in ("nvidia", "generic"):
        ds = daemonset(render(ci_values("dra") | {"kubeletApi": "device-plugin"}), backend)
        assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1}
        assert "POD_UID" not in {e["name"] for e in container(ds)["env"]}


def test_dra_pods_without_metrics_have_no_port_or_probe() -> None:
    values = ci_values("dra") | {"metrics": {"enabled": False}}
    for backend in ("nvidia", "generic"):
        plugin = container(daemonset(render(values), backend))
        assert "ports" not in plugin
        assert "livenessProbe" not in plugin
        assert "readinessProbe" not in plugin


def test_rbac_is_least_privilege() -> None:
    objects = render(ci_values("dra"))
    role = of_kind(objects, "ClusterRole")[ACCOUNT]  # health Events have their own (health-rbac)
    assert role["rules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["create", "get", "list", "watch", "update", "delete"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/status"],
            "verbs": ["update", "patch"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/driver"],
            "resourceNames": ["gpu.nvidia.com", "generic.accel-plugins.io"],
            "verbs": ["associated-node:update", "associated-node:patch"],
        },
        # get: the slices' owner; list and watch: the cordon annotation (kube/cordon.py).
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    ]
    binding = of_kind(objects, "ClusterRoleBinding")[ACCOUNT]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == ACCOUNT
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}
    ]
    assert list(of_kind(objects, "ServiceAccount")) == [ACCOUNT]


def test_a_device_class_per_device_kind() -> None:
    classes = of_kind(render(ci_values("dra")), "DeviceClass")
    expressions = {
        name: [s["cel"]["expression"] for s in c["spec"]["selectors"]]
        for name, c in classes.items()
    }
    gpu = 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"]'
    generic = (
        'device.driver == "generic.accel-plugins.io" && '
        'device.attributes["generic.accel-plugins.io"]'
    )
    assert expressions == {
        "gpu.nvidia.com": [f'{gpu}.type == "gpu"'],
        "mig.nvidia.com": [f'{gpu}.type == "mig"'],
        "extended-gpu.nvidia.com": [f'{gpu}.resource == "nvidia.com/gpu"'],
        "serial.accel-plugins.io": [f'{generic}.resource == "accel-plugins.io/serial"'],
        "fuse.accel-plugins.io": [f'{generic}.resource == "accel-plugins.io/fuse"'],
    }


@pytest.mark.parametrize(
    ("values", "classes"),
    [
        pytest.param({"dra": {"deviceClasses": False}}, set(), id="device-classes-off"),
        pytest.param(
            {"nvidia": {"draDriverName": "gpu.example.com"}},
            {"gpu.nvidia.com", "mig.nvidia.com", "extended-gpu.nvidia.com"},
            id="custom-driver-name",
        ),
    ],
)
def test_device_class_options(values: dict[str, Any], classes: set[str]) -> None:
    objects = render({"kubeletApi": "dra", **values})
    found = of_kind(objects, "DeviceClass")
    assert set(found) == classes
    driver = values.get("nvidia", {}).get("draDriverName")
    if driver:
        assert f"--dra-driver-name={driver}" in container(daemonset(objects, "nvidia"))["args"]
        assert all(driver in str(c["spec"]) for c in found.values())


@pytest.mark.parametrize("name", ["defaults", "metrics", "plugin-watcher", "generic-only"])
def test_device_plugin_mode_renders_nothing_of_dra(name: str) -> None:
    objects = render(ci_values(name))
    # The health Events' account and roles are not DRA's (test_chart_health.py).
    health = ("-health-events", "-plugin")
    assert not [
        o for o in objects if o["kind"] in DRA_KINDS and not o["metadata"]["name"].endswith(health)
    ]
    for ds in of_kind(objects, "DaemonSet").values():
        assert not any(a.startswith("--kubelet-api") for a in container(ds)["args"])
        assert PLUGINS not in mounts(ds)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"kubeletApi": "dra"}, id="dra"),
        pytest.param(
            {"kubeletApi": "device-plugin", "kubeletApiSwitch": {"enabled": True}}, id="switch"
        ),
    ],
)
def test_an_nvidia_dra_driver_reads_the_drivers_files_for_its_cdi_devices(values: Obj) -> None:
    """DRA mode answers with self-contained CDI devices by default (issue 35), as NVIDIA's DRA
    driver does: the driver's libraries and utilities are read at /driver-root (the host's
    /, read-only) and named at their host paths; the device plugin's default stays envvar."""
    sets = of_kind(render({**values, "nvidia": {"enabled": True}}), "DaemonSet")
    switch = "kubeletApiSwitch" in values
    ds = sets[f"{RELEASE}-accel-plugins-nvidia" + ("-dra" if switch else "")]
    assert "--driver-root-ctr-path=/driver-root" in container(ds)["args"]
    _, read_only, volume = mounts(ds)["/driver-root"]
    assert read_only
    assert volume["hostPath"]["path"] == "/"
    if switch:  # the same node's device plugin keeps NVIDIA's default, envvar
        assert "/driver-root" not in mounts(sets[f"{RELEASE}-accel-plugins-nvidia"])


def test_one_cdi_mount_when_device_plugin_cdi_shares_the_directory() -> None:
    values = {"kubeletApi": "dra", "nvidia": {"deviceListStrategy": "cdi-cri"}}
    ds = daemonset(render(values), "nvidia")
    paths = [m["mountPath"] for m in container(ds)["volumeMounts"]]
    assert paths.count(CDI) == 1


# -- against a real API server ----------------------------------------------------------


def _dra_objects() -> list[Obj]:
    """All but the opaque-parameters policy: what ``applied`` applies stays on the session's
    API server, where that policy would refuse the invalid claims other tests create to see
    Prepare refuse them (test_chart_dra_opaque_parameters.py applies it and deletes it)."""
    return [
        o
        for o in render(ci_values("dra"))
        if o["kind"] in DRA_KINDS and not o["metadata"]["name"].endswith("-opaque-parameters")
    ]


async def _apply(kube: AsyncClient, objects: list[Obj]) -> None:
    from lightkube import codecs
    from lightkube.core.resource import GlobalResource
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    from accel_plugins.dra.kube.client import FIELD_MANAGER

    namespace = Namespace(metadata=ObjectMeta(name=NAMESPACE))
    await kube.apply(namespace, field_manager=FIELD_MANAGER)
    for obj in objects:
        resource = cast("GlobalResource", codecs.from_dict(obj))  # namespaced ones name theirs
        await kube.apply(resource, field_manager=FIELD_MANAGER)


@pytest.fixture
async def applied(kube: AsyncClient) -> AsyncIterator[None]:
    """The rendered DRA objects applied; the DeviceClasses deleted after (other tests
    of the session may create gpu.nvidia.com themselves)."""
    from lightkube.resources.resource_v1 import DeviceClass

    objects = _dra_objects()
    await _apply(kube, objects)
    yield
    for obj in objects:
        if obj["kind"] == "DeviceClass":
            await kube.delete(DeviceClass, obj["metadata"]["name"])


@pytest.mark.usefixtures("applied")
async def test_rendered_rbac_and_device_classes_are_accepted_by_the_api_server(
    kube: AsyncClient,
) -> None:
    from lightkube.resources.resource_v1 import DeviceClass

    names = {c.metadata.name async for c in kube.list(DeviceClass) if c.metadata}
    assert {"gpu.nvidia.com", "mig.nvidia.com", "serial.accel-plugins.io"} <= names


@pytest.mark.usefixtures("applied")
async def test_the_service_account_can_do_what_the_driver_needs_and_no_more(
    kube: AsyncClient, kube_node: str, kube_apiserver: ApiServer
) -> None:
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Secret
    from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimStatus, ResourceSlice

    from accel_plugins.dra.kube import KubeSlicePublisher
    from accel_plugins.plugin.device import Device, tree

    # As the DaemonSet's pod on that node has it: a token bound to the pod (the node-scope
    # policy admits only such a token's node).
    client = await pod_client(kube, kube_apiserver, kube_node)
    try:
        driver = "generic.accel-plugins.io"
        publisher = KubeSlicePublisher(client, driver=driver, node=kube_node)
        await publisher.publish(tree({"accel-plugins.io/serial": [Device(id="tty0")]}))
        assert publisher.in_sync  # nodes get, resourceslices list/watch/create (and dry-run)
        await publisher.publish(tree({"accel-plugins.io/serial": [Device(id="tty1")]}))
        assert publisher.in_sync  # resourceslices update
        name, before = f"{kube_node}-{driver}-0", publisher.generation
        await kube.delete(ResourceSlice, name)  # the kubelet's wipe
        deadline = time.monotonic() + 30
        while True:  # repaired through the watch: created again, one generation on
            found = [
                s async for s in kube.list(ResourceSlice) if s.metadata and s.metadata.name == name
            ]
            if found and found[0].spec.pool.generation > before:
                break
            assert time.monotonic() < deadline, "not repaired"
            await asyncio.sleep(0.02)  # the API server has no event for "it is back"
        await publisher.close()
        with pytest.raises(ApiError) as missing:  # the driver's one claim call: GET
            await client.get(ResourceClaim, "no-such-claim", namespace="default")
        assert missing.value.status.code == 404
        for forbidden in (
            client.get(Secret, "anything", namespace=NAMESPACE),
            anext(aiter(client.list(ResourceClaim, namespace="default"))),
            # Claims' metadata and spec stay read-only: status is all it writes (below).
            client.patch(ResourceClaim, "any", {"metadata": {}}, namespace="default"),
        ):
            with pytest.raises(ApiError) as refused:
                await forbidden
            assert refused.value.status.code == 403
        # status.devices of the claims it prepares (tests/e2e/test_dra_claim_status.py):
        # allowed, so a missing claim is not found rather than forbidden.
        with pytest.raises(ApiError) as absent:
            await client.patch(ResourceClaimStatus, "any", {"status": {}}, namespace="default")
        assert absent.value.status.code == 404
    finally:
        await client.close()


async def pod_client(kube: AsyncClient, server: ApiServer, node: str) -> AsyncClient:
    """A client with the driver ServiceAccount's token bound to a pod on ``node``, as the
    kubelet projects it into the DaemonSet's pod: the API server then names the node in
    the request's user info (authentication.kubernetes.io/node-name, 1.32+)."""
    from lightkube import KubeConfig
    from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod, ServiceAccountToken

    from accel_plugins.dra.kube import make_client

    pod = await kube.create(
        cast(
            Pod,
            Pod.from_dict(
                {
                    "metadata": {"generateName": "dra-driver-", "namespace": NAMESPACE},
                    "spec": {
                        "nodeName": node,
                        "serviceAccountName": ACCOUNT,
                        "automountServiceAccountToken": False,
                        "containers": [{"name": "driver", "image": "accel-plugins:test"}],
                    },
                }
            ),
        )
    )
    assert pod.metadata is not None
    bound = BoundObjectReference(
        apiVersion="v1", kind="Pod", name=pod.metadata.name, uid=pod.metadata.uid
    )
    token = await kube.create(
        ServiceAccountToken(
            metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], boundObjectRef=bound)
        ),
        ACCOUNT,
        namespace=NAMESPACE,
    )
    assert token.status is not None
    return make_client(KubeConfig.from_dict(server.kubeconfig(token.status.token)))


def test_the_node_scope_policy_matches_the_drivers_account_and_every_slice_write() -> None:
    objects = render(ci_values("dra"))
    policy = of_kind(objects, "ValidatingAdmissionPolicy")[POLICY]["spec"]
    assert policy["failurePolicy"] == "Fail"
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["resourceslices"]
    assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    assert f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}" in str(policy["matchConditions"])
    binding = of_kind(objects, "ValidatingAdmissionPolicyBinding")[POLICY]["spec"]
    assert binding == {"policyName": POLICY, "validationActions": ["Deny"]}
    off = render(ci_values("dra") | {"dra": {"nodeScopedSlices": False}})
    assert POLICY not in of_kind(off, "ValidatingAdmissionPolicy")


@pytest.mark.usefixtures("applied")
async def test_each_nodes_driver_writes_only_its_own_nodes_slices(
    kube: AsyncClient, kube_apiserver: ApiServer, kube_node: str
) -> None:
    """Two nodes' drivers, each with its pod-bound token: each creates, updates and deletes
    its own node's slice, and is refused all three on the other's (issue 31: before the
    policy, 6 of 6 such foreign writes were accepted). A token bound to no pod names no
    node and writes nothing. The policy's CEL is checked by the API server at create."""
    from lightkube import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.admissionregistration_v1 import ValidatingAdmissionPolicyBinding
    from lightkube.resources.core_v1 import Node
    from lightkube.resources.resource_v1 import ResourceSlice

    other = f"{kube_node}-b"
    await kube.create(Node(metadata=ObjectMeta(name=other)))
    clients = {n: await pod_client(kube, kube_apiserver, n) for n in (kube_node, other)}

    def slice_for(node: str, device: str = "dev-0") -> ResourceSlice:
        return cast(
            ResourceSlice,
            ResourceSlice.from_dict(
                {
                    "metadata": {"name": f"{node}-scope-test"},
                    "spec": {
                        "driver": "generic.accel-plugins.io",
                        "nodeName": node,
                        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": device}],
                    },
                }
            ),
        )

    async def refused(call: Any) -> str:
        with pytest.raises(ApiError) as denied:
            await call
        assert denied.value.status.code == 403
        return denied.value.status.message or ""

    binding = next(o for o in _dra_objects() if o["kind"] == "ValidatingAdmissionPolicyBinding")
    try:
        # Without the binding, RBAC alone: the other node's slice is created, updated and
        # deleted by this node's driver (what the policy is for; it proves the test too).
        await kube.delete(ValidatingAdmissionPolicyBinding, POLICY)
        await until_policy(clients[kube_node], slice_for(other), active=False)
        await clients[kube_node].replace(slice_for(other, "dev-1"))
        await clients[kube_node].delete(ResourceSlice, f"{other}-scope-test")
        await _apply(kube, [binding])
        await until_policy(clients[kube_node], slice_for(other), active=True)
        for me, them in ((kube_node, other), (other, kube_node)):
            mine = clients[me]
            await mine.create(slice_for(me))
            await mine.replace(slice_for(me, "dev-1"))
            message = await refused(mine.create(slice_for(them)))
            assert f"on node {me} may write only that node's ResourceSlices" in message
            await kube.create(slice_for(them))  # the other node's, as its driver wrote it
            await refused(mine.replace(slice_for(them, "dev-1")))
            await refused(mine.delete(ResourceSlice, f"{them}-scope-test"))
            # (Moving a slice to another node is refused before admission: spec.nodeName
            # is immutable.)
            await mine.delete(ResourceSlice, f"{me}-scope-test")
            await kube.delete(ResourceSlice, f"{them}-scope-test")
        # The ServiceAccount's token from the TokenRequest API, bound to no pod.
        from lightkube import KubeConfig
        from lightkube.models.authentication_v1 import TokenRequestSpec
        from lightkube.resources.core_v1 import ServiceAccountToken

        from accel_plugins.dra.kube import make_client

        token = await kube.create(
            ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[])),
            ACCOUNT,
            namespace=NAMESPACE,
        )
        assert token.status is not None
        unbound = make_client(KubeConfig.from_dict(kube_apiserver.kubeconfig(token.status.token)))
        try:
            assert "names no node" in await refused(unbound.create(slice_for(kube_node)))
        finally:
            await unbound.close()
    finally:
        for client in clients.values():
            await client.close()
        await kube.delete(Node, other)


async def until_policy(client: AsyncClient, item: Any, *, active: bool) -> None:
    """Create ``item`` until the API server's admission agrees with ``active``: a policy or
    binding takes effect once the server has loaded it, and no event says when. With
    ``active`` False the slice is left created."""
    from lightkube import ApiError
    from lightkube.resources.resource_v1 import ResourceSlice

    deadline = time.monotonic() + 30
    while True:
        try:
            await client.create(item)
        except ApiError as exc:
            refused = exc.status
            if active:
                break
        else:
            if not active:
                return
            await client.delete(ResourceSlice, item.metadata.name)
        assert time.monotonic() < deadline, f"the node-scope policy never became {active}"
        await asyncio.sleep(0.1)
    assert refused.code == 403, refused.message
