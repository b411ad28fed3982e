"""Device nodes outside /dev only with an explicit opt-in, one per side.

A generic config decides which host files the runtime hands to containers as
device nodes. A `Device` entry whose host path or container path leaves /dev
is refused with the field named, unless that entry opts in for that side.
`Mount` entries are bind mounts and may point anywhere.
"""

from __future__ import annotations

import pytest

from accel_plugins.backends.generic.config import PathSpec, PathType, parse_config
from accel_plugins.errors import ConfigError

FIELD = "devices[0].groups[0].paths[0]"


def one_path(entry: str) -> str:
    return f"devices: [{{name: x, groups: [{{paths: [{entry}]}}]}}]\n"


@pytest.mark.parametrize(
    ("entry", "field", "opt_in"),
    [
        pytest.param("{path: /opt/a}", "path", "allowMountPathOutsideDev", id="bare-path"),
        pytest.param(
            "{path: /etc/shadow, mountPath: /dev/shadow}",
            "path",
            "allowHostPathOutsideDev",
            id="host-file-dressed-as-device",
        ),
        pytest.param(
            "{path: /devices/x, mountPath: /dev/x}",
            "path",
            "allowHostPathOutsideDev",
            id="prefix-is-not-a-directory",
        ),
        pytest.param(
            "{path: /dev/a, mountPath: /opt/a}",
            "mountPath",
            "allowMountPathOutsideDev",
            id="container-side",
        ),
        pytest.param(
            "{path: /opt/a, allowMountPathOutsideDev: true}",
            "path",
            "allowHostPathOutsideDev",
            id="one-opt-in-does-not-cover-the-other-side",
        ),
        pytest.param(
            "{path: /run/dev/a, mountPath: /x/a, allowHostPathOutsideDev: true}",
            "mountPath",
            "allowMountPathOutsideDev",
            id="nor-the-other-way-round",
        ),
    ],
)
def test_refused_without_the_opt_in(entry: str, field: str, opt_in: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(one_path(entry), "c.yaml")
    assert caught.value.field == f"{FIELD}.{field}"
    assert f"set {opt_in}: true on this path" in caught.value.reason


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        pytest.param("{path: /dev/ttyUSB*}", PathSpec("/dev/ttyUSB*"), id="under-dev"),
        pytest.param(
            "{path: /run/nvidia/driver/dev/nvidia0, mountPath: /dev/nvidia0, "
            "allowHostPathOutsideDev: true}",
            PathSpec(
                "/run/nvidia/driver/dev/nvidia0",
                mount_path="/dev/nvidia0",
                allow_host_path_outside_dev=True,
            ),
            id="host-opt-in",
        ),
        pytest.param(
            "{path: /opt/a, allowHostPathOutsideDev: true, allowMountPathOutsideDev: true}",
            PathSpec("/opt/a", allow_host_path_outside_dev=True, allow_mount_path_outside_dev=True),
            id="both-opt-ins",
        ),
        pytest.param(
            "{path: /srv/models, mountPath: /models, type: Mount}",
            PathSpec("/srv/models", mount_path="/models", type=PathType.MOUNT),
            id="mounts-need-none",
        ),
    ],
)
def test_accepted(entry: str, expected: PathSpec) -> None:
    (device,) = parse_config(one_path(entry), "c.yaml").devices
    assert device.groups[0].paths == (expected,)


def test_the_opt_in_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(one_path("{path: /dev/a, allowHostPathOutsideDev: 'yes'}"), "c.yaml")
    assert caught.value.field == f"{FIELD}.allowHostPathOutsideDev"
