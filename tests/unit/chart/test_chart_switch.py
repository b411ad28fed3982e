"""The per-node switch (kubeletApiSwitch) and pods unchanged (extendedResourceName).

With the switch, each backend runs a device-plugin and a DRA DaemonSet whose node affinities
never overlap: the label ``accel-plugins.io/kubelet-api`` names a node's mode, and unlabelled
nodes run ``kubeletApi``'s. The DeviceClasses carry ``spec.extendedResourceName`` (KEP-5004;
the field is DeviceClassSpec.ExtendedResourceName in kubernetes/kubernetes
staging/src/k8s.io/api/resource/v1/types.go), one class per device-plugin resource name.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart import Obj, container, mounts, of_kind, render

LABEL = "accel-plugins.io/kubelet-api"
GENERIC = {
    "enabled": True,
    "devices": [{"name": "fuse", "groups": [{"count": 10, "paths": [{"path": "/dev/fuse"}]}]}],
}


def _terms(ds: Obj) -> list[list[tuple[str, str, tuple[str, ...]]]]:
    """The required node selector terms, each as (key, operator, values) expressions."""
    affinity = ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [
        [(e["key"], e["operator"], tuple(e.get("values", ()))) for e in t["matchExpressions"]]
        for t in terms
    ]


def _runs_on(ds: Obj, labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` matches the DaemonSet's required node affinity."""

    def holds(key: str, operator: str, values: tuple[str, ...]) -> bool:
        if operator == "In":
            return labels.get(key) in values
        assert operator == "DoesNotExist"
        return key not in labels

    return any(all(holds(*e) for e in term) for term in _terms(ds))


@pytest.mark.parametrize("default", ["device-plugin", "dra"])
@pytest.mark.parametrize(
    ("node", "mode"),
    [
        pytest.param({LABEL: "device-plugin"}, "device-plugin", id="labelled-device-plugin"),
        pytest.param({LABEL: "dra"}, "dra", id="labelled-dra"),
        pytest.param({}, None, id="unlabelled-runs-the-default"),
        pytest.param({LABEL: "typo"}, "", id="unknown-value-runs-neither"),
    ],
)
def test_each_node_runs_exactly_its_modes_daemonset(
    default: str, node: dict[str, str], mode: str | None
) -> None:
    objects = render({"kubeletApi": default, "kubeletApiSwitch": {"enabled": True}})
    sets = of_kind(objects, "DaemonSet")
    names = {"device-plugin": "rel-accel-plugins-nvidia", "dra": "rel-accel-plugins-nvidia-dra"}
    assert set(sets) == set(names.values())
    wanted = default if mode is None else mode
    running = {m for m, name in names.items() if _runs_on(sets[name], node)}
    assert running == ({wanted} if wanted else set())


def test_each_modes_daemonset_runs_its_mode_and_reads_the_other() -> None:
    sets = of_kind(render({"kubeletApiSwitch": {"enabled": True}}), "DaemonSet")
    plugin, driver = sets["rel-accel-plugins-nvidia"], sets["rel-accel-plugins-nvidia-dra"]
    assert "--kubelet-api=dra" in container(driver)["args"]
    assert "--kubelet-api=dra" not in container(plugin)["args"]
    for ds in (plugin, driver):
        args = container(ds)["args"]
        assert f"--kubelet-api-switch-label={LABEL}" in args
        assert "--kubelet-api-default=device-plugin" in args
    # The device plugin reads the DRA driver's checkpoint: it names the driver's directory.
    assert "--dra-driver-name=gpu.nvidia.com" in container(plugin)["args"]
    # Selectors differ, so the two DaemonSets never adopt each other's pods.
    assert plugin["spec"]["selector"] != driver["spec"]["selector"]
    # Each mounts what it waits on: the other mode's sockets or checkpoint, and PodResources.
    by_volume = [{name: ro for name, ro, _ in mounts(ds).values()} for ds in (plugin, driver)]
    assert by_volume[0]["kubelet-plugins"] is True  # read-only: it only reads the checkpoint
    assert by_volume[1]["device-plugins"] is True  # read-only: it only waits for sockets to go
    assert "pod-resources" in by_volume[0]
    assert "pod-resources" in by_volume[1]
    # Both run under the DRA driver's account (slices, claims; health Events).
    accounts = {ds["spec"]["template"]["spec"]["serviceAccountName"] for ds in (plugin, driver)}
    assert accounts == {"rel-accel-plugins-dra"}


def test_the_switch_combines_with_per_node_configs() -> None:
    values: dict[str, Any] = {
        "kubeletApiSwitch": {"enabled": True},
        "nvidia": {"configs": {"map": {"default": {"version": "v1"}, "big": {"version": "v1"}}}},
    }
    sets = of_kind(render(values), "DaemonSet")
    assert set(sets) == {
        "rel-accel-plugins-nvidia-default",
        "rel-accel-plugins-nvidia-big",
        "rel-accel-plugins-nvidia-default-dra",
        "rel-accel-plugins-nvidia-big-dra",
    }
    config = "nvidia.com/device-plugin.config"
    node = {config: "big", LABEL: "dra"}
    assert [n for n, ds in sets.items() if _runs_on(ds, node)] == [
        "rel-accel-plugins-nvidia-big-dra"
    ]
    assert [n for n, ds in sets.items() if _runs_on(ds, {})] == ["rel-accel-plugins-nvidia-default"]


def test_without_the_switch_one_daemonset_and_no_mode_label() -> None:
    sets = of_kind(render({}), "DaemonSet")
    assert list(sets) == ["rel-accel-plugins-nvidia"]
    assert LABEL not in str(sets["rel-accel-plugins-nvidia"]["spec"])


def _extended(objects: list[Obj]) -> dict[str, tuple[str, str]]:
    """DeviceClass name -> (extendedResourceName, selector) for the classes that have one."""
    return {
        name: (c["spec"]["extendedResourceName"], c["spec"]["selectors"][0]["cel"]["expression"])
        for name, c in of_kind(objects, "DeviceClass").items()
        if "extendedResourceName" in c["spec"]
    }


NV = 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].resource == '
GEN = (
    'device.driver == "generic.accel-plugins.io" && '
    'device.attributes["generic.accel-plugins.io"].resource == '
)


@pytest.mark.parametrize(
    ("values", "classes"),
    [
        pytest.param(
            {"kubeletApi": "dra"},
            {"extended-gpu.nvidia.com": ("nvidia.com/gpu", NV + '"nvidia.com/gpu"')},
            id="nvidia-gpu-by-default",
        ),
        pytest.param(
            {
                "kubeletApiSwitch": {"enabled": True},
                "nvidia": {
                    "extendedResourceNames": [
                        "nvidia.com/gpu.shared",
                        "nvidia.com/mig-1g.10gb",
                        "nvidia.com/a100",
                    ]
                },
            },
            {
                "extended-gpu.shared.nvidia.com": (
                    "nvidia.com/gpu.shared",
                    NV + '"nvidia.com/gpu.shared"',
                ),
                "extended-mig-1g.10gb.nvidia.com": (
                    "nvidia.com/mig-1g.10gb",
                    NV + '"nvidia.com/mig-1g.10gb"',
                ),
                "extended-a100.nvidia.com": ("nvidia.com/a100", NV + '"nvidia.com/a100"'),
            },
            id="time-sliced-mig-and-renamed",
        ),
        pytest.param(
            {"kubeletApi": "dra", "nvidia": {"enabled": False}, "generic": GENERIC},
            {"fuse.accel-plugins.io": ("accel-plugins.io/fuse", GEN + '"accel-plugins.io/fuse"')},
            id="generic",
        ),
        pytest.param({"kubeletApi": "dra", "dra": {"extendedResources": False}}, {}, id="off"),
    ],
)
def test_a_class_per_device_plugin_resource_name(
    values: dict[str, Any], classes: dict[str, tuple[str, str]]
) -> None:
    assert _extended(render(values)) == classes


def test_device_plugin_mode_without_the_switch_renders_no_class() -> None:
    assert of_kind(render({}), "DeviceClass") == {}
