"""The chart with NVIDIA's CDI strategies: the spec directory mounted read-write, the driver read.

With ``cdi-annotations`` or ``cdi-cri`` (``nvidia.deviceListStrategy`` or the config's
``flags.plugin.deviceListStrategy``; an ``existingConfigMap`` may hold one) the plugin writes
its CDI specs (``--cdi-spec-dir``) into the host's ``nvidia.cdi.specDir`` and reads the
driver's files under ``/driver-root`` (``--driver-root-ctr-path``, NVIDIA's chart's mount
of the host's driver root) when the driver root is ``/``; any other driver root is mounted at
its own path already. Without a CDI strategy none of it is rendered.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart import Obj, ci_values, container, daemonset, mounts, render

CDI_ARGS = ["--cdi-spec-dir=/var/run/cdi", "--driver-root-ctr-path=/driver-root"]
SPECS = (
    "cdi",
    False,
    {"name": "cdi", "hostPath": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}},
)
DRIVER = (
    "cdi-driver-root",
    True,
    {"name": "cdi-driver-root", "hostPath": {"path": "/", "type": "Directory"}},
)


def nvidia(**values: Any) -> Obj:
    return daemonset(render({"nvidia": {"enabled": True, **values}}), "nvidia")


@pytest.mark.parametrize(
    ("values", "cdi"),
    [
        pytest.param({}, False, id="default-envvar"),
        pytest.param({"deviceListStrategy": "cdi-annotations"}, True, id="flag-cdi-annotations"),
        pytest.param({"deviceListStrategy": "envvar,cdi-cri"}, True, id="flag-envvar+cdi-cri"),
        pytest.param({"deviceListStrategy": "volume-mounts"}, False, id="flag-volume-mounts"),
        pytest.param(
            {"config": {"version": "v1", "flags": {"plugin": {"deviceListStrategy": "cdi-cri"}}}},
            True,
            id="config-string",
        ),
        pytest.param(
            {
                "config": {
                    "version": "v1",
                    "flags": {"plugin": {"deviceListStrategy": ["envvar", "cdi-annotations"]}},
                }
            },
            True,
            id="config-list",
        ),
        pytest.param(
            {
                "deviceListStrategy": "envvar",
                "config": {"version": "v1", "flags": {"plugin": {"deviceListStrategy": "cdi-cri"}}},
            },
            False,
            id="flag-wins-over-config",
        ),
        pytest.param(
            {"existingConfigMap": "gpu-config"}, True, id="existing-configmap-may-hold-one"
        ),
        pytest.param(
            {"existingConfigMap": "gpu-config", "deviceListStrategy": "envvar"},
            False,
            id="existing-configmap-with-flag",
        ),
    ],
)
def test_a_cdi_strategy_mounts_the_spec_dir_and_the_driver_root(
    values: dict[str, Any], cdi: bool
) -> None:
    ds = nvidia(**values)
    args = container(ds)["args"]
    found = mounts(ds)
    if cdi:
        assert all(a in args for a in CDI_ARGS)
        assert found["/var/run/cdi"] == SPECS
        assert found["/driver-root"] == DRIVER
    else:
        assert not [a for a in args if a.startswith(("--cdi-spec-dir", "--driver-root-ctr"))]
        assert "/var/run/cdi" not in found
        assert "/driver-root" not in found


def test_another_spec_dir_and_a_driver_container_root() -> None:
    """A driver root other than / is mounted at its own path: no /driver-root then."""
    ds = nvidia(
        deviceListStrategy="cdi-cri", driverRoot="/run/nvidia/driver", cdi={"specDir": "/etc/cdi"}
    )
    args = container(ds)["args"]
    assert "--cdi-spec-dir=/etc/cdi" in args
    assert "--nvidia-driver-root=/run/nvidia/driver" in args
    found = mounts(ds)
    assert found["/etc/cdi"][:2] == ("cdi", False)
    assert found["/run/nvidia/driver"][:2] == ("driver-root", True)
    assert "/driver-root" not in found


def test_the_ci_values_file_renders_cdi() -> None:
    ds = daemonset(render(ci_values("nvidia-cdi")), "nvidia")
    assert all(a in container(ds)["args"] for a in CDI_ARGS)
    assert mounts(ds)["/var/run/cdi"] == SPECS
