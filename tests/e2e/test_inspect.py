"""``inspect`` against a plugin on a real socket: report, rendering, dry-run and failures."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from accel_plugins.inspector.command import (
    DryRun,
    InspectError,
    InspectReport,
    inspect_plugin,
    render_json,
    render_text,
)
from accel_plugins.kubelet_emulator import ContainerResponse, DeviceState, PluginOptions
from accel_plugins.kubelet_emulator.client import unix_target
from tests.fixtures.kubelet import MakePlugin
from tests.support.cli import run_cli_async

DEVICES = [
    DeviceState("w0", numa_nodes=(0,)),
    DeviceState("w1", numa_nodes=(0, 1)),
    DeviceState("w2", "Unhealthy", numa_nodes=(1,)),
    DeviceState("w3"),
]
PREFERRED = PluginOptions(get_preferred_allocation_available=True)


async def test_report_lists_options_and_devices(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(DEVICES, options=PREFERRED)

    report = await inspect_plugin(plugin.socket_path)

    assert report.options == PREFERRED
    assert report.devices == tuple(DEVICES)
    assert (report.total, report.healthy, report.unhealthy) == (4, 3, 1)
    assert report.dry_run is None
    # Inspecting is read-only: no allocation happened.
    assert plugin.calls == ["GetDevicePluginOptions", "ListAndWatch"]


async def test_text_rendering(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(DEVICES, options=PREFERRED)

    text = render_text(await inspect_plugin(plugin.socket_path))

    assert text.splitlines() == [
        f"plugin socket: {plugin.socket_path}",
        "options: pre_start_required=no, get_preferred_allocation_available=yes",
        "devices: 4 total, 3 healthy, 1 unhealthy",
        "  ID  HEALTH     NUMA",
        "  w0  Healthy    0",
        "  w1  Healthy    0,1",
        "  w2  Unhealthy  1",
        "  w3  Healthy    -",
    ]


async def test_dry_run_uses_the_plugins_preference(make_plugin: MakePlugin) -> None:
    # The stub prefers the highest healthy ids.
    plugin = await make_plugin(DEVICES, options=PREFERRED)

    report = await inspect_plugin(plugin.socket_path, allocate=2)

    assert plugin.preferred_requests == [(["w0", "w1", "w3"], [], 2)]
    assert report.dry_run is not None
    assert report.dry_run.preferred_by_plugin
    assert report.dry_run.device_ids == ("w1", "w3")
    assert dict(report.dry_run.response.envs) == {"WIDGETS": "w1,w3"}
    assert "PreStartContainer" not in plugin.calls
    text = render_text(report)
    assert "dry-run allocation of 2 (preferred by the plugin): w1, w3" in text
    for line in [
        "    WIDGETS=w1,w3",
        "    /usr/lib/widget -> /opt/widget (read-only)",
        "    /dev/w1 -> /dev/w1 (rw)",
        "    example.com/widgets=w1,w3",
        "    example.com/widget=w3",
    ]:
        assert line in text.splitlines()


async def test_dry_run_without_preference_takes_first_sorted(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(DEVICES)

    report = await inspect_plugin(plugin.socket_path, allocate=2)

    assert report.dry_run is not None
    assert not report.dry_run.preferred_by_plugin
    assert report.dry_run.device_ids == ("w0", "w1")
    assert "GetPreferredAllocation" not in plugin.calls


async def test_json_rendering(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(DEVICES, options=PREFERRED)

    doc = json.loads(render_json(await inspect_plugin(plugin.socket_path, allocate=1)))

    assert doc["socket"] == str(plugin.socket_path)
    assert doc["options"] == {
        "pre_start_required": False,
        "get_preferred_allocation_available": True,
    }
    assert doc["counts"] == {"total": 4, "healthy": 3, "unhealthy": 1}
    assert doc["devices"][1] == {"id": "w1", "health": "Healthy", "numa_nodes": [0, 1]}
    assert doc["dry_run"] == {
        "requested": 1,
        "preferred_by_plugin": True,
        "device_ids": ["w3"],
        "response": {
            "envs": {"WIDGETS": "w3"},
            "mounts": [
                {"container_path": "/opt/widget", "host_path": "/usr/lib/widget", "read_only": True}
            ],
            "devices": [{"container_path": "/dev/w3", "host_path": "/dev/w3", "permissions": "rw"}],
            "annotations": {"example.com/widgets": "w3"},
            "cdi_devices": ["example.com/widget=w3"],
        },
        "pre_start": None,
    }


# -- failures ------------------------------------------------------------------------------


@pytest.fixture
def refused_socket(kubelet_dir: Path) -> Path:
    """A socket file nobody listens on any more (the plugin died)."""
    path = kubelet_dir / "dead.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
    return path


@pytest.fixture
def silent_socket(kubelet_dir: Path) -> Iterator[Path]:
    """A socket that accepts connections (kernel backlog) but never speaks gRPC."""
    path = kubelet_dir / "silent.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        s.listen(8)
        yield path


@pytest.fixture
async def empty_grpc_socket(kubelet_dir: Path) -> AsyncIterator[Path]:
    """A gRPC server without the DevicePlugin service."""
    path = kubelet_dir / "other.sock"
    server = grpc.aio.server()
    server.add_insecure_port(unix_target(path))
    await server.start()
    yield path
    await server.stop(None)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("missing.sock", "no such file", id="missing"),
        pytest.param("regular-file", "not a unix socket", id="regular-file"),
        pytest.param("a-dir", "not a unix socket", id="directory"),
    ],
)
async def test_not_a_socket(kubelet_dir: Path, name: str, message: str) -> None:
    (kubelet_dir / "regular-file").write_text("")
    (kubelet_dir / "a-dir").mkdir()

    with pytest.raises(InspectError, match=message):
        await inspect_plugin(kubelet_dir / name)


async def test_nobody_listening(refused_socket: Path) -> None:
    with pytest.raises(InspectError, match="nobody is listening"):
        await inspect_plugin(refused_socket)


async def test_silent_socket_times_out(silent_socket: Path) -> None:
    with pytest.raises(InspectError, match=r"no answer to GetDevicePluginOptions within 0.2s"):
        await inspect_plugin(silent_socket, timeout=0.2)


async def test_not_a_device_plugin(empty_grpc_socket: Path) -> None:
    with pytest.raises(InspectError, match="does not implement GetDevicePluginOptions"):
        await inspect_plugin(empty_grpc_socket)


@pytest.mark.parametrize(
    ("method", "allocate"),
    [
        pytest.param("GetDevicePluginOptions", 0, id="options"),
        pytest.param("ListAndWatch", 0, id="list-and-watch"),
        pytest.param("GetPreferredAllocation", 1, id="preferred"),
        pytest.param("Allocate", 1, id="allocate"),
    ],
)
async def test_plugin_errors_name_the_call_and_code(
    make_plugin: MakePlugin, method: str, allocate: int
) -> None:
    plugin = await make_plugin(DEVICES, options=PREFERRED)
    plugin.errors[method] = (grpc.StatusCode.INTERNAL, "widget\non fire")

    with pytest.raises(InspectError) as caught:
        await inspect_plugin(plugin.socket_path, allocate=allocate)

    assert str(caught.value) == f"{plugin.socket_path}: {method} failed: INTERNAL: widget on fire"


@pytest.mark.parametrize(
    ("allocate", "message"),
    [
        pytest.param(4, "only 3 healthy device", id="more-than-healthy"),
        pytest.param(-1, "must be 0 or more", id="negative"),
    ],
)
async def test_bad_dry_run_sizes(make_plugin: MakePlugin, allocate: int, message: str) -> None:
    plugin = await make_plugin(DEVICES)

    with pytest.raises(InspectError, match=message):
        await inspect_plugin(plugin.socket_path, allocate=allocate)

    assert plugin.allocate_requests == []


async def test_invalid_preferred_answer(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(
        DEVICES, options=PREFERRED, preferred=lambda available, must, size: ["w2"]
    )

    with pytest.raises(InspectError, match="not offered as available: w2"):
        await inspect_plugin(plugin.socket_path, allocate=1)


# -- the command line ----------------------------------------------------------------------


async def _cli(*args: str) -> tuple[int, str, str]:
    return await run_cli_async("inspect", *args)


async def test_cli_prints_json(make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(DEVICES)

    code, out, err = await _cli(str(plugin.socket_path), "--json", "--allocate", "1")

    assert code == 0, err
    assert json.loads(out)["dry_run"]["device_ids"] == ["w0"]


async def test_cli_error_is_one_line_and_exit_1(refused_socket: Path) -> None:
    code, out, err = await _cli(str(refused_socket))

    assert code == 1
    assert out == ""
    assert err.strip().count("\n") == 0
    assert "nobody is listening" in err


async def test_relative_socket_path(
    make_plugin: MakePlugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = await make_plugin(DEVICES)
    monkeypatch.chdir(plugin.socket_path.parent)

    report = await inspect_plugin(Path(plugin.socket_path.name))

    assert report.total == 4


def test_empty_response_sections_say_none() -> None:
    report = InspectReport(
        socket=Path("/x.sock"),
        options=PluginOptions(),
        devices=(DeviceState("a"),),
        dry_run=DryRun(1, False, ("a",), ContainerResponse(envs={"A": "1"})),
    )

    assert render_text(report).splitlines()[-10:] == [
        "  envs:",
        "    A=1",
        "  mounts:",
        "    (none)",
        "  device specs:",
        "    (none)",
        "  annotations:",
        "    (none)",
        "  CDI devices:",
        "    (none)",
    ]
