"""The chart's metrics wiring: the port, the probe, and the pod resources socket for attribution."""

from __future__ import annotations

import pytest

from tests.support.chart import Obj, container, daemonset, mounts, render


@pytest.mark.parametrize(
    ("values", "directory"),
    [
        pytest.param({}, "/var/lib/kubelet/pod-resources", id="default"),
        pytest.param(
            {"common": {"podResourcesDir": "/data/kubelet/pod-resources/"}},
            "/data/kubelet/pod-resources/",
            id="elsewhere",
        ),
    ],
)
@pytest.mark.parametrize("backend", ["nvidia", "generic"])
def test_the_plugin_finds_the_pod_resources_socket_it_mounts(
    values: Obj, directory: str, backend: str
) -> None:
    generic = {
        "enabled": True,
        "devices": [{"name": "serial", "groups": [{"paths": [{"path": "/dev/ttyUSB*"}]}]}],
    }
    ds = daemonset(render({**values, "generic": generic}), backend)
    env = {e["name"]: e.get("value") for e in container(ds)["env"]}
    socket = env["ACCEL_PLUGINS_POD_RESOURCES_SOCKET"]
    assert socket == directory.rstrip("/") + "/kubelet.sock"
    mounted = {path.rstrip("/"): ro for path, (_, ro, _) in mounts(ds).items()}
    assert mounted[directory.rstrip("/")] is True  # read-only is enough to call List


def test_metrics_off_drops_port_probe_and_address() -> None:
    ds = daemonset(render({"metrics": {"enabled": False}}), "nvidia")
    plugin = container(ds)
    env = {e["name"]: e.get("value") for e in plugin["env"]}
    assert env["ACCEL_PLUGINS_METRICS_ADDRESS"] == ""  # empty disables /metrics and /healthz
    assert "ports" not in plugin
    assert "livenessProbe" not in plugin
    assert "readinessProbe" not in plugin
