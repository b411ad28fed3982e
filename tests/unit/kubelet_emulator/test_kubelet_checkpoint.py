"""The allocation checkpoint: format, atomic writes, corruption, and kubelet restarts."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from accel_plugins.kubelet_emulator import (
    AllocationRecord,
    CheckpointError,
    ContainerResponse,
    InsufficientDevicesError,
    Kubelet,
    checkpoint,
)
from accel_plugins.kubelet_emulator.model import DeviceSpec, MountSpec
from tests.fixtures.kubelet import RESOURCE, MakePlugin, register, widgets

RECORD = AllocationRecord(
    namespace="ml",
    pod="trainer",
    container="main",
    resource=RESOURCE,
    device_ids=("w0", "w1"),
    response=ContainerResponse(
        envs={"WIDGETS": "w0,w1"},
        mounts=(MountSpec("/opt/w", "/usr/lib/w", True),),
        devices=(DeviceSpec("/dev/w0", "/dev/w0", "rw"),),
        annotations={"a": "b"},
        cdi_devices=("example.com/widget=w0",),
    ),
)


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"

    checkpoint.write(path, [RECORD])

    assert checkpoint.read(path) == [RECORD]
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    assert doc["entries"][0]["device_ids"] == ["w0", "w1"]
    assert doc["checksum"].startswith("sha256:")
    # Written atomically: no temp file left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kubelet_internal_checkpoint"]


def test_missing_file_means_no_allocations(tmp_path: Path) -> None:
    assert checkpoint.read(tmp_path / "absent") == []


def _doc() -> dict[str, object]:
    result: dict[str, object] = json.loads(checkpoint.encode([RECORD]))
    return result


def _entries_edit(**changes: object) -> str:
    doc = _doc()
    entries = doc["entries"]
    assert isinstance(entries, list)
    entries[0].update(changes)
    # Keep the checksum right so the field check itself is what fails.
    doc["checksum"] = checkpoint._checksum(entries)
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("{not json", "not valid JSON", id="not-json"),
        pytest.param("[]", "JSON object", id="not-an-object"),
        pytest.param(json.dumps({**_doc(), "version": 7}), "version: expected 1", id="version"),
        pytest.param(
            json.dumps({**_doc(), "entries": {}}), "entries: expected a list", id="entries"
        ),
        pytest.param(
            json.dumps({**_doc(), "checksum": "sha256:00"}), "checksum", id="checksum-mismatch"
        ),
        pytest.param(_entries_edit(pod=3), "entries[0].pod: expected a string", id="pod-type"),
        pytest.param(_entries_edit(device_ids="w0"), "entries[0].device_ids", id="device-ids-type"),
        pytest.param(_entries_edit(response="!!"), "entries[0].response", id="response-base64"),
    ],
)
def test_corrupt_checkpoints_are_named(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text(text)

    with pytest.raises(CheckpointError) as caught:
        checkpoint.read(path)

    assert reason in str(caught.value)
    assert str(path) in str(caught.value)


async def test_allocation_is_checkpointed_and_reloaded_after_restart(
    kubelet: Kubelet, make_plugin: MakePlugin
) -> None:
    plugin = await make_plugin(widgets(3))
    await register(kubelet, plugin)
    record = await kubelet.allocate("pod-a", "main", RESOURCE, 2)
    assert checkpoint.read(kubelet.checkpoint_path) == [record]

    await kubelet.restart()

    assert kubelet.allocations == [record]
    assert kubelet.checkpoint_error is None
    # A new kubelet knows no plugin until it registers again.
    assert kubelet.resources == {}
    await plugin.restart()
    await register(kubelet, plugin)
    # The checkpointed devices stay taken.
    with pytest.raises(InsufficientDevicesError, match="only 1 healthy"):
        await kubelet.allocate("pod-b", "main", RESOURCE, 2)


async def test_a_fresh_kubelet_reads_the_checkpoint(
    kubelet: Kubelet, make_plugin: MakePlugin, kubelet_dir: Path
) -> None:
    plugin = await make_plugin(widgets(1))
    await register(kubelet, plugin)
    record = await kubelet.allocate("pod-a", "main", RESOURCE, 1)
    await kubelet.stop()

    async with Kubelet(kubelet_dir) as again:
        assert again.allocations == [record]


async def test_release_rewrites_the_checkpoint(kubelet: Kubelet, make_plugin: MakePlugin) -> None:
    plugin = await make_plugin(widgets(2))
    await register(kubelet, plugin)
    await kubelet.allocate("pod-a", "main", RESOURCE, 1)
    kept = await kubelet.allocate("pod-b", "main", RESOURCE, 1)

    kubelet.release("pod-a")

    assert checkpoint.read(kubelet.checkpoint_path) == [kept]


async def test_restart_removes_sockets_but_the_checkpoint(
    kubelet: Kubelet, make_plugin: MakePlugin, kubelet_dir: Path
) -> None:
    plugin = await make_plugin(widgets(1))
    await register(kubelet, plugin)
    await kubelet.allocate("pod-a", "main", RESOURCE, 1)
    (kubelet_dir / "stale-file").write_text("x")
    (kubelet_dir / "subdir").mkdir()
    assert plugin.socket_path.exists()

    await kubelet.restart()

    names = sorted(p.name for p in kubelet_dir.iterdir())
    assert names == ["kubelet.sock", "kubelet_internal_checkpoint", "pod-resources", "subdir"]
    # The plugin's socket vanished: that is its signal to re-register.
    assert not plugin.socket_path.exists()


async def test_start_removes_stale_sockets(kubelet_dir: Path) -> None:
    stale = kubelet_dir / "old-plugin.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))

    async with Kubelet(kubelet_dir) as kubelet:
        assert not stale.exists()
        assert kubelet.socket_path.exists()


async def test_corrupt_checkpoint_is_reported_and_ignored(
    kubelet_dir: Path, make_plugin: MakePlugin
) -> None:
    (kubelet_dir / "kubelet_internal_checkpoint").write_text("{garbage")
    events: list[str] = []

    async with Kubelet(kubelet_dir, on_event=events.append) as kubelet:
        assert kubelet.allocations == []
        assert kubelet.checkpoint_error is not None
        assert "not valid JSON" in str(kubelet.checkpoint_error)
        assert any("ignored unreadable checkpoint" in line for line in events)
        # The next allocation writes a good checkpoint over it.
        plugin = await make_plugin(widgets(1))
        await register(kubelet, plugin)
        record = await kubelet.allocate("pod-a", "main", RESOURCE, 1)
        assert checkpoint.read(kubelet.checkpoint_path) == [record]
