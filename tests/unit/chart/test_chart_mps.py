"""The chart's MPS control daemon: rendered only when the NVIDIA config shares GPUs with MPS.

NVIDIA's chart (deployments/helm/nvidia-device-plugin/templates/daemonset-mps-control-daemon.yml)
runs a second DaemonSet with the host MPS root and <root>/shm at /dev/shm, hostPID by default;
ours renders it only for an MPS config, without its privileged mode (values.yaml nvidia.mps
says why each remaining privilege is there; test_chart_security.py checks them).
"""

from __future__ import annotations

import pytest

from tests.support.chart import Obj, ci_values, container, mounts, of_kind, render

MPS_CONFIG = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
SLICED_CONFIG = {"sharing": {"timeSlicing": {"resources": [{"name": "gpu", "replicas": 2}]}}}
DAEMON = "rel-accel-plugins-nvidia-mps"
PLUGIN = "rel-accel-plugins-nvidia"


def daemonsets(nvidia: Obj) -> dict[str, Obj]:
    return of_kind(render({"nvidia": nvidia}), "DaemonSet")


@pytest.mark.parametrize(
    ("nvidia", "rendered"),
    [
        pytest.param({}, False, id="defaults"),
        pytest.param({"config": SLICED_CONFIG}, False, id="time-slicing-only"),
        pytest.param({"config": MPS_CONFIG}, True, id="config-sets-sharing-mps"),
        pytest.param({"config": {"sharing": {"mps": None}}}, False, id="null-mps-is-no-mps"),
        pytest.param({"existingConfigMap": "mine"}, False, id="existing-configmap-unknown"),
        pytest.param({"existingConfigMap": "mine", "mps": {"enabled": True}}, True, id="forced-on"),
        pytest.param({"config": MPS_CONFIG, "mps": {"enabled": False}}, False, id="forced-off"),
    ],
)
def test_rendered_only_when_mps_is_configured(nvidia: Obj, rendered: bool) -> None:
    objects = daemonsets({"enabled": True, **nvidia})
    assert (DAEMON in objects) is rendered
    plugin = container(objects[PLUGIN])
    # The plugin follows the daemon's files only when there is a daemon.
    assert ("--mps-root=/run/nvidia/mps" in plugin["args"]) is rendered
    assert ("/run/nvidia/mps" in mounts(objects[PLUGIN])) is rendered


def test_no_daemon_without_the_nvidia_backend() -> None:
    values = ci_values("generic-only")
    values["nvidia"] = {"enabled": False, "config": MPS_CONFIG}
    assert DAEMON not in of_kind(render(values), "DaemonSet")


def test_the_daemon_runs_the_plugins_config_and_image() -> None:
    objects = of_kind(render(ci_values("mps")), "DaemonSet")
    daemon, plugin = container(objects[DAEMON]), container(objects[PLUGIN])
    assert daemon["image"] == plugin["image"]
    assert daemon["command"] == ["accel-plugins", "mps-control-daemon"]
    assert daemon["args"] == [
        "--config=/etc/accel-plugins/config.yaml",
        "--nvidia-driver-root=/",
        "--mps-root=/run/nvidia/mps",
    ]
    env = {e["name"]: e["value"] for e in daemon["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    pod = objects[DAEMON]["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["hostPID"] is True
    assert "ports" not in daemon  # no metrics, nothing to scrape
    assert mounts(objects[PLUGIN])["/run/nvidia/mps"][1] is True  # plugin: read-only


def test_the_daemons_mounts() -> None:
    objects = of_kind(render(ci_values("mps")), "DaemonSet")
    found = {
        path: (read_only, volume.get("hostPath", {}).get("path"))
        for path, (_, read_only, volume) in mounts(objects[DAEMON]).items()
    }
    assert found == {
        "/run/nvidia/mps": (False, "/run/nvidia/mps"),
        "/dev/shm": (False, "/run/nvidia/mps/shm"),  # what Allocate mounts into clients
        "/tmp": (False, None),
        "/etc/accel-plugins": (True, None),
    }


def test_root_and_host_pid_are_values() -> None:
    objects = daemonsets(
        {"enabled": True, "config": MPS_CONFIG, "mps": {"root": "/var/mps/", "hostPID": False}}
    )
    pod = objects[DAEMON]["spec"]["template"]["spec"]
    assert "hostPID" not in pod
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert volumes == {"mps-root": "/var/mps/", "mps-shm": "/var/mps/shm"}
