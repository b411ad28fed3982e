"""healthEvents: the plugins' ServiceAccount may post Events on their Node and nothing more.

What a Node Event needs comes from client-go's event recorder
(staging/src/k8s.io/client-go/tools/record/event.go, makeEvent: an Event about an object
without a namespace goes to namespace ``default``) and from our poster reading the Node's
UID. The last test applies the rendered RBAC to a real kube-apiserver and acts as the
ServiceAccount.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from tests.support.chart import NAMESPACE, RELEASE, Obj, ci_values, daemonset, helm_sdk, of_kind
from tests.support.chart import render as render_chart

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from accel_plugins.conformance.envtest import ApiServer

NAME = f"{RELEASE}-accel-plugins-health-events"
PLUGIN_ACCOUNT = f"{RELEASE}-accel-plugins-plugin"
DRA_ACCOUNT = f"{RELEASE}-accel-plugins-dra"
EVENTS = [{"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]
# list and watch: the accel-plugins.io/cordon annotation (accel_plugins/kube/cordon.py).
NODES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]


@pytest.fixture(autouse=True)
def _helm() -> None:
    helm_sdk()


def render(values: Obj) -> list[Obj]:
    return render_chart(values)


@pytest.mark.parametrize(
    ("values", "account"),
    [
        pytest.param(ci_values("defaults"), PLUGIN_ACCOUNT, id="device-plugin"),
        pytest.param(ci_values("dra"), DRA_ACCOUNT, id="dra"),
    ],
)
def test_events_create_in_default_and_nodes_read_only(values: Obj, account: str) -> None:
    objects = render(values)
    role = of_kind(objects, "Role")[NAME]
    assert (role["metadata"]["namespace"], role["rules"]) == ("default", EVENTS)
    assert of_kind(objects, "ClusterRole")[NAME]["rules"] == NODES
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        binding = of_kind(objects, kind)[NAME]
        assert binding["subjects"] == subject
        assert binding["roleRef"]["name"] == NAME
    assert list(of_kind(objects, "ServiceAccount")) == [account]
    for ds in of_kind(objects, "DaemonSet").values():
        spec = ds["spec"]["template"]["spec"]
        assert (spec["serviceAccountName"], spec["automountServiceAccountToken"]) == (
            account,
            True,
        )


def test_off_renders_no_account_and_mounts_no_token() -> None:
    objects = render(ci_values("defaults") | {"healthEvents": {"enabled": False}})
    kinds = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    assert [o["metadata"]["name"] for o in objects if o["kind"] in kinds] == []
    spec = daemonset(objects, "nvidia")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec


async def test_the_account_can_post_node_events_and_no_more(
    kube: AsyncClient, kube_node: str, kube_apiserver: ApiServer, tmp_path: Path
) -> None:
    from lightkube import ApiError, KubeConfig, codecs
    from lightkube.core.resource import GlobalResource
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.models.core_v1 import ObjectReference
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Event, Namespace, Node, ServiceAccountToken

    from accel_plugins.kube.client import FIELD_MANAGER, make_client
    from accel_plugins.kube.events import KubeEventPoster
    from accel_plugins.runtime.node_events import NodeEvent

    await kube.apply(Namespace(metadata=ObjectMeta(name=NAMESPACE)), field_manager=FIELD_MANAGER)
    for obj in render(ci_values("defaults")):
        if obj["metadata"]["name"] in (NAME, PLUGIN_ACCOUNT):
            resource = cast("GlobalResource", codecs.from_dict(obj))
            await kube.apply(resource, field_manager=FIELD_MANAGER)
    token = await kube.create(
        ServiceAccountToken(metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[])),
        PLUGIN_ACCOUNT,
        namespace=NAMESPACE,
    )
    assert token.status is not None
    client = make_client(KubeConfig.from_dict(kube_apiserver.kubeconfig(token.status.token)))
    try:
        await KubeEventPoster(client, kube_node).post(
            NodeEvent("DeviceUnhealthy", "Warning", "example.com/card device c0 is Unhealthy")
        )

        async def list_events() -> None:
            async for _ in client.list(Event, namespace="default"):
                pass

        refused: list[Any] = []
        for forbidden in (
            list_events(),
            client.delete(Node, kube_node),
            client.create(
                Event(
                    metadata=ObjectMeta(name="x", namespace=NAMESPACE),
                    involvedObject=ObjectReference(kind="Node", name=kube_node),
                )
            ),
        ):
            with pytest.raises(ApiError) as error:
                await forbidden
            refused.append(error.value.status.code)
        assert refused == [403, 403, 403]

        # And it may follow its Node's cordon annotation (kube/cordon.py), as the plugin does.
        from accel_plugins.kube.cordon import follow_annotation
        from accel_plugins.runtime.cordon import ANNOTATION, Cordons

        cordons = Cordons(tmp_path)
        changed = asyncio.Event()
        cordons.subscribe(changed.set)
        following = asyncio.create_task(follow_annotation(client, kube_node, cordons))
        try:
            await kube.patch(
                Node, kube_node, {"metadata": {"annotations": {ANNOTATION: "c0=bad fan"}}}
            )
            async with asyncio.timeout(30):
                await changed.wait()
            assert cordons.current == {"c0": "bad fan"}
        finally:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
    finally:
        await client.close()
