"""charts/accel-plugins installed on the test node as ``helm install`` would.

No helm binary reaches these machines: the chart is rendered by the Helm v4 SDK (the
engine helm runs, tests/support/chart.py), then applied the way helm v4 applies a
release: server-side apply (its default from v4 on), objects in helm's install order
(kubernetes' kinds in the order of helm's pkg/release/v1/util/kind_sorter.go InstallOrder,
cluster-wide RBAC before the workloads that use it), each annotated
``meta.helm.sh/release-name`` / ``meta.helm.sh/release-namespace`` and labelled
``app.kubernetes.io/managed-by: Helm`` (pkg/action/validate.go's setMetadataVisitor). An
upgrade applies the new render and deletes what it no longer has; uninstall deletes in
the reverse order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.support.chart import CHART, helm_sdk

if TYPE_CHECKING:
    from lightkube import Client

Obj = dict[str, Any]

# helm's InstallOrder (pkg/release/v1/util/kind_sorter.go; PriorityClass first in current
# helm), the kinds this chart renders, in its order.
INSTALL_ORDER = (
    "PriorityClass",
    "Namespace",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "DaemonSet",
    "Deployment",
)


def _order(obj: Obj) -> int:
    kind = obj["kind"]
    return INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER)


def render(release: str, namespace: str, values: Obj) -> list[Obj]:
    import yaml

    helm = helm_sdk()
    with helm.Chart.load(CHART) as chart:
        manifests: dict[str, str] = chart.render(values, name=release, namespace=namespace)
    objects = [
        doc
        for path in sorted(manifests)
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(manifests[path])
        if doc
    ]
    return sorted(objects, key=_order)  # stable: template order within a kind


def _key(obj: Obj) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


@dataclass
class Release:
    """An installed release: its name, namespace and the objects it applied."""

    name: str
    namespace: str
    objects: list[Obj] = field(default_factory=list)

    def daemonsets(self) -> list[str]:
        return [o["metadata"]["name"] for o in self.objects if o["kind"] == "DaemonSet"]


def apply(kube: Client, release: Release, values: Obj) -> None:
    """Install, or upgrade to ``values``: apply the render, delete what dropped out."""
    from lightkube.codecs import from_dict

    objects = render(release.name, release.namespace, values)
    for obj in objects:
        metadata = obj["metadata"]
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding", "DeviceClass", "Namespace"):
            metadata.setdefault("namespace", release.namespace)
        metadata.setdefault("labels", {})["app.kubernetes.io/managed-by"] = "Helm"
        metadata.setdefault("annotations", {}).update(
            {
                "meta.helm.sh/release-name": release.name,
                "meta.helm.sh/release-namespace": release.namespace,
            }
        )
        kube.apply(from_dict(obj), force=True)
    kept = {_key(o) for o in objects}
    for gone in reversed(release.objects):
        if _key(gone) not in kept:
            _delete(kube, gone)
    release.objects = objects


def uninstall(kube: Client, release: Release) -> None:
    for obj in reversed(release.objects):
        _delete(kube, obj)
    release.objects = []


def _delete(kube: Client, obj: Obj) -> None:
    from lightkube.codecs import from_dict

    resource: Any = type(from_dict(obj))  # a generic resource: global or namespaced
    namespace = obj["metadata"].get("namespace")
    with contextlib.suppress(Exception):  # already gone
        kube.delete(resource, obj["metadata"]["name"], namespace=namespace)


@contextlib.contextmanager
def installed(kube: Client, name: str, namespace: str, values: Obj) -> Iterator[Release]:
    from lightkube.codecs import from_dict

    with contextlib.suppress(Exception):  # exists from an earlier release
        kube.create(
            from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        )
    release = Release(name, namespace)
    apply(kube, release, values)
    try:
        yield release
    finally:
        uninstall(kube, release)
