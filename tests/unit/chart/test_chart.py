"""The Helm chart, rendered offline for each ci/*-values.yaml and for conflicting values."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.support.chart import (
    CHART,
    CI_VALUES,
    NAMESPACE,
    RELEASE,
    Obj,
    chart_metadata,
    ci_values,
    container,
    daemonset,
    helm_sdk,
    mounts,
    of_kind,
    package_version,
    render,
    render_notes,
)

# The oldest Kubernetes the chart claims (Chart.yaml kubeVersion) and the newest schema we have.
OLDEST_KUBERNETES = "1.29.0"
NEWEST_KUBERNETES = "1.37.0"
CI_NAMES = [p.name.removesuffix("-values.yaml") for p in CI_VALUES]
PREFIX = f"{RELEASE}-accel-plugins"
FUSE = {"name": "fuse", "groups": [{"paths": [{"path": "/dev/fuse"}]}]}


def test_chart_version_and_app_version_are_the_package_version() -> None:
    meta = chart_metadata()
    assert meta["version"] == package_version()
    assert meta["appVersion"] == package_version()


def test_chart_claims_the_oldest_validated_kubernetes() -> None:
    assert chart_metadata()["kubeVersion"] == f">={OLDEST_KUBERNETES}-0"


def test_ci_values_cover_the_documented_cases() -> None:
    assert set(CI_NAMES) == {
        "defaults",
        "nvidia-only",
        "generic-only",
        "metrics",
        "existing-configmap",
        "plugin-watcher",
        "squat-devices",
        "mps",
        "nvidia-cdi",
        "per-node-configs",
        "dra",
        "third-party-backend",
        "switch",
    }


def _describe_all(node: Obj, where: str) -> list[str]:
    """Paths of schema properties that lack a description."""
    missing = []
    for name, sub in node.get("properties", {}).items():
        path = f"{where}.{name}"
        if not sub.get("description"):
            missing.append(path)
        missing.extend(_describe_all(sub, path))
    items = node.get("items")
    if isinstance(items, dict):
        missing.extend(_describe_all(items, f"{where}[]"))
    return missing


def test_every_schema_property_has_a_description() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert _describe_all(schema, "") == []


def _schema_keys(node: Obj, where: str = "") -> set[str]:
    keys = set()
    for name, sub in node.get("properties", {}).items():
        keys.add(f"{where}{name}")
        keys |= _schema_keys(sub, f"{where}{name}.")
    return keys


def _value_keys(values: Any, where: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(values, dict):
        for name, sub in values.items():
            keys.add(f"{where}{name}")
            # Free-form maps (config, nodeSelector, ...) end where the schema stops naming keys.
            if isinstance(sub, dict) and sub and name not in FREE_FORM:
                keys |= _value_keys(sub, f"{where}{name}.")
    return keys


FREE_FORM = {
    "config",
    "nodeSelector",
    "resources",
    "affinity",
    "podAnnotations",
    "podLabels",
    "annotations",
    "labels",
    "rollingUpdate",
}


def test_every_default_value_is_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert _value_keys(defaults) - _schema_keys(schema) == set()


@pytest.mark.parametrize("name", CI_NAMES)
def test_lint_is_clean(name: str) -> None:
    helm = helm_sdk()
    for kube in (OLDEST_KUBERNETES, NEWEST_KUBERNETES):
        report = helm.lint(CHART, ci_values(name), strict=True, kube_version=f"v{kube}")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert (report["errors"], problems) == ([], [])


@pytest.mark.parametrize("name", CI_NAMES)
@pytest.mark.parametrize("kube", [OLDEST_KUBERNETES, NEWEST_KUBERNETES])
def test_rendered_objects_are_valid_kubernetes(name: str, kube: str) -> None:
    validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for obj in render(ci_values(name)):
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: no schema in kubernetes-validate; its shape is asserted below
        dra_only = ("resource.k8s.io/v1", "admissionregistration.k8s.io/v1")
        if obj["apiVersion"] in dra_only and kube == OLDEST_KUBERNETES:
            # resource.k8s.io/v1 is GA in 1.34, which kubeletApi dra needs, the DRA node-scope
            # policy (admissionregistration's VAP) in 1.30 (tests/unit/chart/test_chart_dra.py).
            continue
        validate.validate(obj, kube, strict=True)


@pytest.mark.parametrize(
    ("name", "daemonsets", "configmaps", "services", "monitors"),
    [
        pytest.param("defaults", ["nvidia"], [], ["nvidia"], [], id="defaults"),
        pytest.param("nvidia-only", ["nvidia"], ["nvidia"], ["nvidia"], [], id="nvidia-only"),
        pytest.param("generic-only", ["generic"], ["generic"], ["generic"], [], id="generic-only"),
        pytest.param(
            "metrics",
            ["generic", "nvidia"],
            ["generic"],
            ["generic", "nvidia"],
            ["generic", "nvidia"],
            id="metrics",
        ),
        pytest.param(
            "existing-configmap",
            ["generic", "nvidia"],
            [],
            ["generic", "nvidia"],
            [],
            id="existing-configmap",
        ),
    ],
)
def test_objects_per_values_file(
    name: str,
    daemonsets: list[str],
    configmaps: list[str],
    services: list[str],
    monitors: list[str],
) -> None:
    objects = render(ci_values(name))
    assert sorted(of_kind(objects, "DaemonSet")) == [f"{PREFIX}-{b}" for b in daemonsets]
    assert sorted(of_kind(objects, "ConfigMap")) == [f"{PREFIX}-{b}" for b in configmaps]
    assert sorted(of_kind(objects, "Service")) == [f"{PREFIX}-{b}-metrics" for b in services]
    assert sorted(of_kind(objects, "ServiceMonitor")) == [f"{PREFIX}-{b}" for b in monitors]
    # Besides the release's namespace, only the health Events' grant, in namespace default
    # where a Node's Events go (test_chart_health.py), and cluster-wide RBAC.
    cluster = ("ClusterRole", "ClusterRoleBinding")
    spaces = {o["metadata"]["namespace"] for o in objects if o["kind"] not in cluster}
    assert spaces == {NAMESPACE, "default"}


@pytest.mark.parametrize("name", CI_NAMES)
def test_labels_and_selectors(name: str) -> None:
    objects = render(ci_values(name))
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "accel-plugins"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/version"] == package_version()
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == f"accel-plugins-{package_version()}"
    pods = [
        ds["spec"]["template"]["metadata"]["labels"]
        for ds in of_kind(objects, "DaemonSet").values()
    ]
    selectors = [
        ds["spec"]["selector"]["matchLabels"] for ds in of_kind(objects, "DaemonSet").values()
    ]
    selectors += [svc["spec"]["selector"] for svc in of_kind(objects, "Service").values()]
    selectors += [
        sm["spec"]["selector"]["matchLabels"] for sm in of_kind(objects, "ServiceMonitor").values()
    ]
    for selector in selectors:
        assert "helm.sh/chart" not in selector
        assert "app.kubernetes.io/version" not in selector
        # Each selects pods of the chart (a DaemonSet per named config: several per backend).
        assert any(selector.items() <= pod_labels.items() for pod_labels in pods)


def test_defaults_run_nvidia_on_nfd_labelled_gpu_nodes() -> None:
    ds = daemonset(render({}), "nvidia")
    spec = ds["spec"]["template"]["spec"]
    plugin = container(ds)
    assert spec["nodeSelector"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    # Every taint tolerated, as device plugins do (test_chart_devices.py).
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["priorityClassName"] == "system-node-critical"
    assert "runtimeClassName" not in spec
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }
    assert plugin["image"] == f"ghcr.io/accel-plugins/accel-plugins-nvidia:{package_version()}"
    assert "resources" not in plugin
    # Flags left empty stay off the command line so a config file can set them.
    assert plugin["args"] == ["--nvidia-driver-root=/"]
    env = {e["name"]: e.get("value") for e in plugin["env"]}
    assert env["ACCEL_PLUGINS_PLUGIN_DIR"] == "/var/lib/kubelet/device-plugins"
    assert env["ACCEL_PLUGINS_METRICS_ADDRESS"] == ":9478"
    assert env["ACCEL_PLUGINS_LOG_FORMAT"] == "json"
    # client-go's qps and the kubelet's burst (--kube-api-qps/--kube-api-burst).
    assert (env["ACCEL_PLUGINS_KUBE_API_QPS"], env["ACCEL_PLUGINS_KUBE_API_BURST"]) == ("5", "100")
    assert plugin["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # Ready once it serves; alive (/healthz) while it waits for the other mode's handover.
    assert plugin["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert ds["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9478",
        "prometheus.io/path": "/metrics",
    }
    assert {
        path: (ro, vol["hostPath"]["path"])
        for path, (_, ro, vol) in mounts(ds).items()
        if "hostPath" in vol
    } == {
        "/var/lib/kubelet/device-plugins": (False, "/var/lib/kubelet/device-plugins"),
        "/var/lib/kubelet/pod-resources": (True, "/var/lib/kubelet/pod-resources"),
        "/var/lib/accel-plugins": (False, "/var/lib/accel-plugins"),  # cordons
    }


def test_nvidia_only_passes_flags_config_and_driver_root() -> None:
    values = ci_values("nvidia-only")
    objects = render(values)
    ds = daemonset(objects, "nvidia")
    plugin = container(ds)
    assert plugin["args"] == [
        "--config=/etc/accel-plugins/config.yaml",
        "--mig-strategy=mixed",
        "--pass-device-specs=true",
        "--shared-devices-allocation-policy=packed",
        "--nvidia-driver-root=/run/nvidia/driver",
    ]
    assert plugin["resources"] == values["nvidia"]["resources"]
    assert ds["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    found = mounts(ds)
    assert found["/run/nvidia/driver"][1:] == (
        True,
        {"name": "driver-root", "hostPath": {"path": "/run/nvidia/driver", "type": "Directory"}},
    )
    assert found["/etc/accel-plugins"][2]["configMap"] == {"name": f"{PREFIX}-nvidia"}
    config = of_kind(objects, "ConfigMap")[f"{PREFIX}-nvidia"]["data"]["config.yaml"]
    assert yaml.safe_load(config) == values["nvidia"]["config"]
    # No checksum: a ConfigMap change is reloaded live, pods are not restarted for it.
    assert "checksum/config" not in ds["spec"]["template"]["metadata"]["annotations"]


def test_generic_only_mounts_host_dev_sys_udev_and_cdi() -> None:
    values = ci_values("generic-only")
    objects = render(values)
    ds = daemonset(objects, "generic")
    assert container(ds)["args"] == [
        "--config=/etc/accel-plugins/config.yaml",
        "--domain=squat.ai",
        "--dev-root=/host/dev",
        "--sys-root=/host/sys",
        "--udev-source=kernel",
        "--cdi-spec-dir=/var/run/cdi",
    ]
    host = {
        path: (ro, vol["hostPath"]["path"])
        for path, (_, ro, vol) in mounts(ds).items()
        if "hostPath" in vol
    }
    assert host == {
        "/var/lib/kubelet/device-plugins": (False, "/var/lib/kubelet/device-plugins"),
        "/var/lib/kubelet/pod-resources": (True, "/var/lib/kubelet/pod-resources"),
        "/var/lib/accel-plugins": (False, "/var/lib/accel-plugins"),  # cordons
        "/host/dev": (True, "/dev"),
        "/host/sys": (True, "/sys"),
        "/run/udev": (True, "/run/udev"),
        "/var/run/cdi": (False, "/var/run/cdi"),
    }
    config = of_kind(objects, "ConfigMap")[f"{PREFIX}-generic"]["data"]["config.yaml"]
    assert yaml.safe_load(config) == {"devices": values["generic"]["devices"]}
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_metrics_service_and_service_monitor() -> None:
    objects = render(ci_values("metrics"))
    for backend in ("nvidia", "generic"):
        ds = daemonset(objects, backend)
        assert container(ds)["ports"] == [
            {"name": "metrics", "containerPort": 9500, "protocol": "TCP"}
        ]
        env = {e["name"]: e.get("value") for e in container(ds)["env"]}
        assert (env["ACCEL_PLUGINS_METRICS_ADDRESS"], env["ACCEL_PLUGINS_LOG_LEVEL"]) == (
            ":9500",
            "debug",
        )
        svc = of_kind(objects, "Service")[f"{PREFIX}-{backend}-metrics"]
        assert svc["spec"]["ports"] == [
            {"name": "metrics", "port": 9500, "targetPort": "metrics", "protocol": "TCP"}
        ]
        assert svc["metadata"]["annotations"] == {"example.com/team": "platform"}
        monitor = of_kind(objects, "ServiceMonitor")[f"{PREFIX}-{backend}"]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["port"] == "metrics"
        assert (endpoint["path"], endpoint["interval"], endpoint["scrapeTimeout"]) == (
            "/metrics",
            "15s",
            "10s",
        )


def test_metrics_disabled_removes_port_probe_service_and_annotations() -> None:
    objects = render({"metrics": {"enabled": False}})
    ds = daemonset(objects, "nvidia")
    plugin = container(ds)
    assert "ports" not in plugin
    assert "livenessProbe" not in plugin
    assert "readinessProbe" not in plugin
    env = {e["name"]: e.get("value") for e in plugin["env"]}
    assert env["ACCEL_PLUGINS_METRICS_ADDRESS"] == ""
    assert of_kind(objects, "Service") == {}
    assert ds["spec"]["template"]["metadata"]["annotations"] is None


def test_existing_config_maps_are_mounted_not_rendered() -> None:
    objects = render(ci_values("existing-configmap"))
    nvidia, generic = daemonset(objects, "nvidia"), daemonset(objects, "generic")
    assert container(nvidia)["args"][0] == "--config=/etc/accel-plugins/nvidia.yaml"
    assert container(generic)["args"][0] == "--config=/etc/accel-plugins/config.yaml"
    assert mounts(nvidia)["/etc/accel-plugins"][2]["configMap"] == {"name": "gpu-config"}
    assert mounts(generic)["/etc/accel-plugins"][2]["configMap"] == {"name": "devices-config"}
    for ds in (nvidia, generic):
        assert "checksum/config" not in ds["spec"]["template"]["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        pytest.param({"tag": "dev"}, "ghcr.io/accel-plugins/accel-plugins-nvidia:dev", id="tag"),
        pytest.param(
            {"digest": "sha256:" + "a" * 64},
            "ghcr.io/accel-plugins/accel-plugins-nvidia@sha256:" + "a" * 64,
            id="digest-wins",
        ),
    ],
)
def test_image_reference(image: Obj, expected: str) -> None:
    assert container(daemonset(render({"nvidia": {"image": image}}), "nvidia"))["image"] == expected


def test_image_without_registry() -> None:
    ds = daemonset(render({"common": {"imageRegistry": ""}}), "nvidia")
    assert container(ds)["image"] == f"accel-plugins/accel-plugins-nvidia:{package_version()}"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"nvidia": {"enabled": False}},
            "nothing to deploy: set nvidia.enabled or generic.enabled",
            id="nothing-enabled",
        ),
        pytest.param(
            {"nvidia": {"config": {"version": "v1"}, "existingConfigMap": "mine"}},
            "nvidia.config and nvidia.existingConfigMap are exclusive",
            id="nvidia-two-configs",
        ),
        pytest.param(
            {"generic": {"enabled": True}},
            "generic.enabled needs devices to expose",
            id="generic-without-devices",
        ),
        pytest.param(
            {"generic": {"devices": [FUSE], "existingConfigMap": "mine"}},
            "generic.devices and generic.existingConfigMap are exclusive",
            id="generic-two-configs",
        ),
        pytest.param(
            {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}},
            "metrics.serviceMonitor.enabled needs metrics.enabled and metrics.service.enabled",
            id="monitor-without-metrics",
        ),
    ],
)
def test_conflicting_values_fail_with_a_message(values: Obj, message: str) -> None:
    helm = helm_sdk()
    with pytest.raises(helm.HelmRenderError, match=message):
        render(values)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        pytest.param({"nvidia": {"migStrategy": "all"}}, "/nvidia/migStrategy", id="mig-strategy"),
        pytest.param(
            {"nvidia": {"deviceListStrategy": "envvar,bogus"}},
            "/nvidia/deviceListStrategy",
            id="device-list-strategy",
        ),
        pytest.param(
            {"nvidia": {"driverRoot": "run/nvidia"}},
            "/nvidia/driverRoot",
            id="relative-driver-root",
        ),
        pytest.param({"common": {"logFormat": "xml"}}, "/common/logFormat", id="log-format"),
        pytest.param({"metrics": {"port": 0}}, "/metrics/port", id="port"),
        pytest.param({"generic": {"udevSource": "yes"}}, "/generic/udevSource", id="udev-source"),
        pytest.param({"nvidia": {"typo": 1}}, "/nvidia", id="unknown-key"),
        pytest.param(
            {"generic": {"devices": [{"groups": []}]}},
            "/generic/devices/0",
            id="device-without-name",
        ),
        pytest.param(
            {"common": {"registration": "watcher"}}, "/common/registration", id="registration"
        ),
        pytest.param(
            {"common": {"pluginsRegistryDir": "plugins_registry"}},
            "/common/pluginsRegistryDir",
            id="relative-plugins-registry-dir",
        ),
    ],
)
def test_schema_rejects_bad_values(values: Obj, where: str) -> None:
    helm = helm_sdk()
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=where):
        chart.validate_schema(values)


@pytest.mark.parametrize("name", CI_NAMES)
def test_ci_values_pass_the_schema(name: str) -> None:
    helm = helm_sdk()
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(ci_values(name))


def test_notes_name_each_daemonset() -> None:
    notes = render_notes(ci_values("metrics"))
    assert f"daemonset/{PREFIX}-nvidia" in notes
    assert f"daemonset/{PREFIX}-generic" in notes
    assert "ServiceMonitor" in notes
