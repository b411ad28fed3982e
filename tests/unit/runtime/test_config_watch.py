"""ConfigWatcher: which file operations count as a change (inotify, no polling)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from accel_plugins.runtime.config_watch import ConfigWatcher, watch_configs
from tests.support.configmap_volume import ConfigMapVolume

Edit = Callable[[Path], object]


def write_in_place(path: Path) -> None:
    path.write_text("b: 2\n")


def replace_by_rename(path: Path) -> None:
    tmp = path.with_name(".new")
    tmp.write_text("b: 2\n")
    os.replace(tmp, path)


def remove(path: Path) -> None:
    path.unlink()


CHANGES = [
    pytest.param(write_in_place, id="editor-writes-in-place"),
    pytest.param(replace_by_rename, id="mv-over-the-file"),
    pytest.param(remove, id="file-removed"),
]


async def changes_of(path: Path, edit: Edit) -> list[Path]:
    """The paths reported after ``edit``, once the events it caused were all handled."""
    # A second watched file, written after the edit: events of one inotify
    # descriptor arrive in order, so its report comes after the edit's.
    sentinel = path.parent / ".sentinel"
    seen: list[Path] = []
    done = asyncio.Event()

    def on_change(p: Path) -> None:
        if p == sentinel:
            done.set()
        else:
            seen.append(p)

    watcher = ConfigWatcher([path, sentinel], on_change)
    try:
        edit(path)
        sentinel.write_text("written last")
        async with asyncio.timeout(5):
            await done.wait()
    finally:
        watcher.close()
    return seen


@pytest.mark.parametrize("edit", CHANGES)
async def test_a_changed_file_is_reported_once(tmp_path: Path, edit: Edit) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("a: 1\n")
    assert await changes_of(path, edit) == [path]


async def test_the_same_content_written_again_is_no_change(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("a: 1\n")
    assert await changes_of(path, lambda p: p.write_text("a: 1\n")) == []


async def test_other_files_in_the_directory_are_no_change(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("a: 1\n")
    assert await changes_of(path, lambda p: (p.parent / "other.yaml").write_text("x")) == []


async def test_a_configmap_update_is_one_change(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "cm")
    volume.write({"config.yaml": "a: 1\n", "other.yaml": "x"})
    path = volume.path("config.yaml")
    # The kubelet's swap: new timestamped dir, ..data_tmp renamed over ..data, old dir removed.
    seen = await changes_of(
        path, lambda p: volume.write({"config.yaml": "b: 2\n", "other.yaml": "x"})
    )
    assert seen == [path]
    assert path.read_text() == "b: 2\n"


async def test_a_configmap_update_of_another_key_is_no_change(tmp_path: Path) -> None:
    volume = ConfigMapVolume(tmp_path / "cm")
    volume.write({"config.yaml": "a: 1\n", "other.yaml": "x"})
    seen = await changes_of(
        volume.path("config.yaml"),
        lambda p: volume.write({"config.yaml": "a: 1\n", "other.yaml": "y"}),
    )
    assert seen == []


async def test_no_paths_watch_nothing() -> None:
    assert watch_configs([], lambda p: None) is None


async def test_a_missing_directory_turns_live_reload_off(tmp_path: Path) -> None:
    assert watch_configs([tmp_path / "absent" / "config.yaml"], lambda p: None) is None
