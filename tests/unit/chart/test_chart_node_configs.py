"""Per-node configs in the chart: named configs, a DaemonSet each, picked by a node label.

NVIDIA's chart takes ``config.map`` (name -> config), ``config.default`` and picks
a node's config at run time from the label ``nvidia.com/device-plugin.config``
(its config-manager, cmd/config-manager/main.go: an explicit default, else the
"named" fallback "default", else the "single" fallback, the only config). We need
no API access: each named config is a DaemonSet whose required node affinity
selects the nodes labelled with its name, the default's also the unlabelled ones.
``node_runs`` evaluates that affinity as the scheduler does, so the table below
reads as "a node with these labels runs these DaemonSets".
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.chart import (
    CHART,
    Obj,
    ci_values,
    container,
    helm_sdk,
    mounts,
    of_kind,
    render,
    render_notes,
)

PREFIX = "rel-accel-plugins"
NV_LABEL = "nvidia.com/device-plugin.config"
GEN_LABEL = "accel-plugins.io/generic.config"
NFD_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
FUSE = {"name": "fuse", "groups": [{"paths": [{"path": "/dev/fuse"}]}]}


def _matches(expression: Obj, labels: dict[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    if operator == "In":
        return labels.get(key) in expression["values"]
    if operator == "NotIn":
        return labels.get(key) not in expression["values"]
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not modelled")


def node_runs(objects: list[Obj], labels: dict[str, str]) -> list[str]:
    """The DaemonSets whose nodeSelector and required node affinity a node with ``labels`` meets."""
    chosen = []
    for name, ds in sorted(of_kind(objects, "DaemonSet").items()):
        spec = ds["spec"]["template"]["spec"]
        if not all(labels.get(k) == v for k, v in spec.get("nodeSelector", {}).items()):
            continue
        required = (
            spec.get("affinity", {})
            .get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution")
        )
        terms = required["nodeSelectorTerms"] if required else [{}]
        if any(all(_matches(e, labels) for e in t.get("matchExpressions", [])) for t in terms):
            chosen.append(name.removeprefix(f"{PREFIX}-"))
    return chosen


GPU_NODE = {"feature.node.kubernetes.io/pci-10de.present": "true"}


@pytest.mark.parametrize(
    ("labels", "runs"),
    [
        pytest.param({}, ["generic-serial", "nvidia-default"], id="unlabelled-gets-defaults"),
        pytest.param(
            {NV_LABEL: "default"}, ["generic-serial", "nvidia-default"], id="named-default"
        ),
        pytest.param(
            {NV_LABEL: "mig-mixed"}, ["generic-serial", "nvidia-mig-mixed"], id="mig-mixed"
        ),
        pytest.param(
            {NV_LABEL: "mig-single", GEN_LABEL: "audio"},
            ["generic-audio", "nvidia-mig-single"],
            id="both-labels",
        ),
        # config-manager fails on a name it does not know; the node gets no plugin rather
        # than silently another config.
        pytest.param({NV_LABEL: "typo"}, ["generic-serial"], id="unknown-name-no-plugin"),
    ],
)
def test_a_node_runs_the_daemonset_of_its_label(labels: dict[str, str], runs: list[str]) -> None:
    objects = render(ci_values("per-node-configs"))
    assert node_runs(objects, GPU_NODE | labels) == runs


def test_relabelling_a_node_moves_only_that_node() -> None:
    objects = render(ci_values("per-node-configs"))
    before = {n: node_runs(objects, GPU_NODE) for n in ("a", "b")}
    after = dict(before, a=node_runs(objects, GPU_NODE | {NV_LABEL: "mig-single"}))
    assert after["a"] == ["generic-serial", "nvidia-mig-single"]
    assert after["b"] == before["b"] == ["generic-serial", "nvidia-default"]
    # Selectors tell the DaemonSets' pods apart, so one controller never adopts another's.
    selectors = [
        tuple(sorted(ds["spec"]["selector"]["matchLabels"].items()))
        for ds in of_kind(objects, "DaemonSet").values()
    ]
    assert len(set(selectors)) == len(selectors)


def test_one_configmap_holds_every_named_config_and_each_daemonset_reads_its_own() -> None:
    values = ci_values("per-node-configs")
    objects = render(values)
    maps = of_kind(objects, "ConfigMap")
    assert sorted(maps[f"{PREFIX}-nvidia"]["data"]) == ["default", "mig-mixed", "mig-single"]
    assert yaml.safe_load(maps[f"{PREFIX}-nvidia"]["data"]["mig-mixed"]) == {
        "version": "v1",
        "flags": {"migStrategy": "mixed"},
    }
    generic = yaml.safe_load(maps[f"{PREFIX}-generic"]["data"]["audio"])
    assert generic == values["generic"]["configs"]["map"]["audio"]
    daemonsets = of_kind(objects, "DaemonSet")
    for backend, names in (
        ("nvidia", ["default", "mig-mixed", "mig-single"]),
        ("generic", ["audio", "serial"]),
    ):
        for name in names:
            ds = daemonsets[f"{PREFIX}-{backend}-{name}"]
            assert container(ds)["args"][0] == f"--config=/etc/accel-plugins/{name}"
            assert mounts(ds)["/etc/accel-plugins"][2]["configMap"] == {
                "name": f"{PREFIX}-{backend}"
            }
            labels = ds["spec"]["template"]["metadata"]["labels"]
            assert labels["accel-plugins.io/config"] == name
            assert "checksum/config" not in ds["spec"]["template"]["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("config", "sys_admin"),
    [
        pytest.param("default", False, id="none-keeps-no-capability"),
        pytest.param("mig-single", True, id="single-gets-sys-admin"),
        pytest.param("mig-mixed", True, id="mixed-gets-sys-admin"),
    ],
)
def test_a_named_configs_mig_strategy_decides_the_capability(config: str, sys_admin: bool) -> None:
    ds = of_kind(render(ci_values("per-node-configs")), "DaemonSet")[f"{PREFIX}-nvidia-{config}"]
    added = container(ds)["securityContext"]["capabilities"].get("add", [])
    assert ("SYS_ADMIN" in added) == sys_admin


def test_a_named_configs_device_list_strategy_decides_cdi() -> None:
    cdi = "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
    values = {"nvidia": {"configs": {"map": {"default": {"version": "v1"}, "cdi": cdi}}}}
    daemonsets = of_kind(render(values), "DaemonSet")
    args = {n: container(ds)["args"] for n, ds in daemonsets.items()}
    assert any(a.startswith("--cdi-spec-dir") for a in args[f"{PREFIX}-nvidia-cdi"])
    assert not any(a.startswith("--cdi-spec-dir") for a in args[f"{PREFIX}-nvidia-default"])


def test_common_affinity_is_kept_in_every_term() -> None:
    theirs = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
    values: dict[str, Any] = {
        "common": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [theirs]
                    }
                }
            }
        },
        "nvidia": {
            "configs": {"map": {"a": {"version": "v1"}, "b": {"version": "v1"}}, "default": "a"}
        },
    }
    objects = render(values)
    assert node_runs(objects, GPU_NODE | {"pool": "gpu"}) == ["nvidia-a"]
    assert node_runs(objects, GPU_NODE | {"pool": "gpu", NV_LABEL: "b"}) == ["nvidia-b"]
    assert node_runs(objects, GPU_NODE | {"pool": "cpu", NV_LABEL: "b"}) == []


@pytest.mark.parametrize(
    ("configs", "default"),
    [
        pytest.param({"map": {"only": {}}}, "only", id="single-fallback"),
        pytest.param({"map": {"a": {}, "default": {}}}, "default", id="named-fallback"),
        pytest.param({"map": {"a": {}, "default": {}}, "default": "a"}, "a", id="explicit"),
    ],
)
def test_the_default_config_follows_config_managers_fallbacks(
    configs: dict[str, Any], default: str
) -> None:
    objects = render({"nvidia": {"configs": configs}})
    assert node_runs(objects, GPU_NODE) == [f"nvidia-{default}"]


def test_an_existing_configmap_names_its_configs() -> None:
    values = {
        "nvidia": {"existingConfigMap": "gpu-configs", "configs": {"names": ["default", "big"]}}
    }
    objects = render(values)
    assert not of_kind(objects, "ConfigMap")
    ds = of_kind(objects, "DaemonSet")[f"{PREFIX}-nvidia-big"]
    assert container(ds)["args"][0] == "--config=/etc/accel-plugins/big"
    assert mounts(ds)["/etc/accel-plugins"][2]["configMap"] == {"name": "gpu-configs"}
    assert node_runs(objects, GPU_NODE) == ["nvidia-default"]


def test_notes_name_each_daemonset_and_the_label() -> None:
    notes = render_notes(ci_values("per-node-configs"))
    assert f"daemonset/{PREFIX}-nvidia-mig-mixed" in notes
    assert f"kubectl label node NODE {NV_LABEL}=CONFIG --overwrite" in notes
    assert f"picked by the node label {GEN_LABEL} (unlabelled nodes: serial)" in notes


def test_nfd_feature_file_is_off_by_default_and_mounted_when_on() -> None:
    ds = of_kind(render({}), "DaemonSet")[f"{PREFIX}-nvidia"]
    assert not [a for a in container(ds)["args"] if a.startswith("--nfd-features-file")]
    assert NFD_DIR not in mounts(ds)
    ds = of_kind(render(ci_values("per-node-configs")), "DaemonSet")[f"{PREFIX}-nvidia-default"]
    assert f"--nfd-features-file={NFD_DIR}/accel-plugins-nvidia" in container(ds)["args"]
    assert mounts(ds)[NFD_DIR][1:] == (
        False,
        {"name": "nfd-features", "hostPath": {"path": NFD_DIR, "type": "DirectoryOrCreate"}},
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"nvidia": {"config": {"version": "v1"}, "configs": {"map": {"a": {}}}}},
            "nvidia.configs.map and nvidia.config are exclusive",
            id="nvidia-one-and-named",
        ),
        pytest.param(
            {
                "generic": {
                    "enabled": True,
                    "devices": [FUSE],
                    "configs": {"map": {"a": {}}},
                }
            },
            "generic.configs.map and generic.devices \\(and devices\\) are exclusive",
            id="generic-one-and-named",
        ),
        pytest.param(
            {"nvidia": {"existingConfigMap": "x", "configs": {"map": {"a": {}}}}},
            "nvidia.configs.map and nvidia.existingConfigMap are exclusive",
            id="map-and-existing",
        ),
        pytest.param(
            {"nvidia": {"configs": {"names": ["a"]}}},
            "nvidia.configs.names lists keys of nvidia.existingConfigMap, which is not set",
            id="names-without-existing",
        ),
        pytest.param(
            {"nvidia": {"configs": {"map": {"a": {}, "b": {}}}}},
            "nvidia.configs.default must name the config of nodes without the label "
            "nvidia.com/device-plugin.config",
            id="no-default",
        ),
        pytest.param(
            {"nvidia": {"configs": {"map": {"a": {}}, "default": "b"}}},
            'nvidia.configs.default "b" is not one of the configs',
            id="unknown-default",
        ),
        pytest.param(
            {"nvidia": {"configs": {"map": {"a": {}}}, "mps": {"enabled": True}}},
            "nvidia.mps.enabled with nvidia.configs",
            id="mps-daemon-reads-one-config",
        ),
    ],
)
def test_contradictions_fail_the_render(values: Obj, message: str) -> None:
    helm = helm_sdk()
    with pytest.raises(helm.HelmRenderError, match=message):
        render(values)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        pytest.param(
            {"nvidia": {"configs": {"map": {"Big_GPU": {}}}}},
            "invalid propertyName 'Big_GPU'",
            id="bad-name",
        ),
        pytest.param(
            {"generic": {"configs": {"nodeLabel": "bad label"}}},
            "/generic/configs/nodeLabel",
            id="bad-label",
        ),
        pytest.param(
            {"nvidia": {"configs": {"map": {"a": 3}}}}, "/nvidia/configs/map/a", id="number"
        ),
        pytest.param(
            {"nvidia": {"nfd": {"featuresDir": "features.d"}}},
            "/nvidia/nfd/featuresDir",
            id="relative-dir",
        ),
    ],
)
def test_schema_rejects_bad_per_node_values(values: Obj, where: str) -> None:
    helm = helm_sdk()
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=where):
        chart.validate_schema(values)
