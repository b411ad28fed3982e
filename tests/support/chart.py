"""Render charts/accel-plugins offline (Helm v4 SDK) for the chart tests.

Importing this module needs no Helm: tests call ``helm_sdk()`` first, which
skips them when the optional ``helm-python-sdk`` package is not installed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "accel-plugins"
CI_VALUES = sorted(CHART.glob("ci/*-values.yaml"))
RELEASE = "rel"
NAMESPACE = "accel"

Obj = dict[str, Any]


def helm_sdk() -> ModuleType:
    sdk: ModuleType = pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    return sdk


def package_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        return str(tomllib.load(handle)["project"]["version"])


def chart_metadata() -> Obj:
    loaded: Obj = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return loaded


def ci_values(name: str) -> Obj:
    loaded: Obj | None = yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text())
    return loaded or {}


def render(values: Obj) -> list[Obj]:
    """Every object the chart renders for ``values``, in template order."""
    helm = helm_sdk()
    with helm.Chart.load(CHART) as chart:
        manifests: dict[str, str] = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    objects: list[Obj] = []
    for path in sorted(manifests):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(manifests[path]) if doc)
    return objects


def render_notes(values: Obj) -> str:
    helm = helm_sdk()
    with helm.Chart.load(CHART) as chart:
        manifests: dict[str, str] = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return manifests["accel-plugins/templates/NOTES.txt"]


def of_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def daemonset(objects: list[Obj], backend: str) -> Obj:
    return of_kind(objects, "DaemonSet")[f"{RELEASE}-accel-plugins-{backend}"]


def container(ds: Obj) -> Obj:
    containers: list[Obj] = ds["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def mounts(ds: Obj) -> dict[str, tuple[str, bool, Obj]]:
    """mountPath -> (volume name, read-only, volume source) of the plugin container."""
    volumes = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    return {
        m["mountPath"]: (m["name"], bool(m.get("readOnly", False)), volumes[m["name"]])
        for m in container(ds)["volumeMounts"]
    }
