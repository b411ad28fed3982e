"""Plugin socket names: readable, one per resource, never another plugin's name.

NVIDIA's plugin serves nvidia.com/gpu at ``nvidia-gpu.sock``
(NVIDIA/k8s-device-plugin, internal/plugin/server.go: DevicePluginPath +
"nvidia-" + name + ".sock", name being the part after "nvidia.com/");
squat's at ``generic-device-plugin-<base64(resource)>-<unix time>.sock``
(squat/generic-device-plugin, deviceplugin/plugin.go). Ours must differ from
both, so running beside them while migrating never removes their socket.
"""

from __future__ import annotations

import pytest

from accel_plugins.runtime.server import socket_name


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        pytest.param("nvidia.com/gpu", "nvidia.com_gpu.sock", id="nvidia-gpu"),
        pytest.param("nvidia.com/mig-1g.10gb", "nvidia.com_mig-1g.10gb.sock", id="mig"),
        pytest.param("accel-plugins.io/audio", "accel-plugins.io_audio.sock", id="generic"),
        pytest.param("squat.ai/serial", "squat.ai_serial.sock", id="squat-domain"),
        pytest.param("example.com/a_b", "example.com_a_b.sock", id="underscore-in-name"),
    ],
)
def test_names(resource: str, expected: str) -> None:
    assert socket_name(resource) == expected


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # '-' may sit in a domain and in a name: a '-' separator would join these.
        pytest.param("a-b.io/c", "a.io/b-c", id="dash-either-side"),
        pytest.param("a.io/b.c", "a.io.b/c", id="dot-either-side"),
    ],
)
def test_distinct_resources_get_distinct_names(first: str, second: str) -> None:
    assert socket_name(first) != socket_name(second)


def test_never_the_names_of_nvidia_or_squat() -> None:
    assert socket_name("nvidia.com/gpu") != "nvidia-gpu.sock"
    assert not socket_name("squat.ai/audio").startswith("generic-device-plugin-")


def test_a_prefix_is_kept_when_asked_for() -> None:
    assert socket_name("nvidia.com/gpu", "dev-") == "dev-nvidia.com_gpu.sock"
