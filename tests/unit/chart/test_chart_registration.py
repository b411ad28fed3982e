"""The chart's registration value: kubelet (Register on kubelet.sock) or plugin-watcher (a
registration socket in the kubelet's plugins_registry, mounted read-write only then)."""

from __future__ import annotations

import pytest

from tests.support.chart import (
    Obj,
    ci_values,
    container,
    daemonset,
    helm_sdk,
    mounts,
    of_kind,
    render,
)

REGISTRY = "/var/lib/kubelet/plugins_registry"


def env(ds: Obj) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container(ds)["env"]}


def test_kubelet_registration_is_the_default_and_mounts_no_registry() -> None:
    for ds in of_kind(render(ci_values("metrics")), "DaemonSet").values():
        found = env(ds)
        assert found["ACCEL_PLUGINS_REGISTRATION"] == "kubelet"
        assert "ACCEL_PLUGINS_PLUGINS_REGISTRY_DIR" not in found
        assert REGISTRY not in mounts(ds)
        volumes = ds["spec"]["template"]["spec"]["volumes"]
        assert "plugins-registry" not in {v["name"] for v in volumes}


def test_plugin_watcher_mode_passes_the_mode_and_mounts_the_registry_read_write() -> None:
    objects = render(ci_values("plugin-watcher"))
    for backend in ("nvidia", "generic"):
        ds = daemonset(objects, backend)
        found = env(ds)
        assert found["ACCEL_PLUGINS_REGISTRATION"] == "plugin-watcher"
        assert found["ACCEL_PLUGINS_PLUGINS_REGISTRY_DIR"] == REGISTRY
        assert mounts(ds)[REGISTRY] == (
            "plugins-registry",
            False,
            {
                "name": "plugins-registry",
                "hostPath": {"path": REGISTRY, "type": "DirectoryOrCreate"},
            },
        )
        # The endpoint GetInfo names is the device plugin socket's path as the plugin
        # sees it: the device plugin directory must be mounted at its host path.
        device_plugins = mounts(ds)["/var/lib/kubelet/device-plugins"]
        assert device_plugins[2]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"


def test_a_custom_registry_directory() -> None:
    values = {"common": {"registration": "plugin-watcher", "pluginsRegistryDir": "/k/registry"}}
    ds = daemonset(render(values), "nvidia")
    assert env(ds)["ACCEL_PLUGINS_PLUGINS_REGISTRY_DIR"] == "/k/registry"
    assert mounts(ds)["/k/registry"][2]["hostPath"]["path"] == "/k/registry"


def test_the_registry_cannot_be_the_device_plugin_directory() -> None:
    helm = helm_sdk()
    values = {
        "common": {
            "registration": "plugin-watcher",
            "pluginsRegistryDir": "/var/lib/kubelet/device-plugins/",
        }
    }
    with pytest.raises(helm.HelmRenderError, match=r"common\.pluginsRegistryDir must differ"):
        render(values)
