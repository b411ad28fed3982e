"""The chart's part in one cordon: the state directory on the host, in every plugin and mode.

A cordon must outlive the plugin pod and a switch of mode (docs/cordon-and-mps-health.md),
so the state directory is a hostPath both DaemonSets mount at the same path, named to the
plugin by ACCEL_PLUGINS_STATE_DIR; the annotation watch's RBAC is in test_chart_health.py
and test_chart_dra.py.
"""

from __future__ import annotations

import pytest

from tests.support.chart import Obj, ci_values, container, daemonset, helm_sdk, mounts, render

STATE_DIR = "/var/lib/accel-plugins"


@pytest.fixture(autouse=True)
def _helm() -> None:
    helm_sdk()


@pytest.mark.parametrize(
    ("values", "backend"),
    [
        pytest.param(ci_values("defaults"), "nvidia", id="device-plugin"),
        pytest.param(ci_values("dra"), "nvidia", id="dra"),
        pytest.param(
            {"common": {"stateDir": "/srv/accel"}, "nvidia": {"enabled": True}},
            "nvidia",
            id="moved",
        ),
    ],
)
def test_every_plugin_mounts_the_host_state_dir(values: Obj, backend: str) -> None:
    ds = daemonset(render(values), backend)
    wanted = values.get("common", {}).get("stateDir", STATE_DIR)
    name, read_only, source = mounts(ds)[wanted]
    assert name == "state"
    assert not read_only  # `kubectl exec ... accel-plugins cordon` writes there
    assert source["hostPath"] == {"path": wanted, "type": "DirectoryOrCreate"}
    env = {e["name"]: e.get("value") for e in container(ds)["env"]}
    assert env["ACCEL_PLUGINS_STATE_DIR"] == wanted
