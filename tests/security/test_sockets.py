"""Plugin sockets are 0600, and the plugin never loosens the kubelet's directory.

Checked with the loosest umask a process can have (0), so the modes come from
the code and not from the environment. A directory the plugin has to create
gets the kubelet's own mode, 0750.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.device import Device, tree
from tests.fixtures.framework import ScriptedBackend, StartManager

WIDGET = "example.com/widget"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loosest_umask() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


def backend() -> ScriptedBackend:
    return ScriptedBackend(tree({WIDGET: [Device("w0")]}))


@pytest.mark.usefixtures("loosest_umask")
@pytest.mark.parametrize(
    "dir_mode",
    [
        pytest.param(0o700, id="0700"),
        pytest.param(0o750, id="0750-kubelet-default"),
        pytest.param(0o755, id="0755"),
    ],
)
async def test_sockets_are_0600_and_the_directory_keeps_its_mode(
    kubelet: Kubelet, start_manager: StartManager, kubelet_dir: Path, dir_mode: int
) -> None:
    kubelet_dir.chmod(dir_mode)
    await start_manager(backend())
    await kubelet.wait_for_resource(WIDGET, allocatable=1)
    (socket,) = kubelet_dir.glob("*_*.sock")
    assert mode(socket) == 0o600

    # Served again after a kubelet restart wiped it: still 0600.
    await kubelet.restart()
    await kubelet.wait_for_resource(WIDGET, allocatable=1)
    (socket,) = kubelet_dir.glob("*_*.sock")
    assert mode(socket) == 0o600
    assert mode(kubelet_dir) == dir_mode


@pytest.mark.usefixtures("loosest_umask")
async def test_a_missing_plugin_directory_is_created_0750(
    start_manager: StartManager, kubelet_dir: Path
) -> None:
    shutil.rmtree(kubelet_dir)
    plugin_dir = kubelet_dir / "device-plugins"
    plugin = backend()
    running = await start_manager(plugin, plugin_dir=plugin_dir)
    await plugin.started.wait()  # the manager made its directories before starting it
    async with Kubelet(plugin_dir) as kubelet:
        await kubelet.wait_for_resource(WIDGET, allocatable=1)
        assert mode(plugin_dir) == 0o750
    await running.manager.stop()
