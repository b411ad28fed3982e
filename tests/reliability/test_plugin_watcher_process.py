"""Plugin-watcher registration end to end: `accel-plugins nvidia --simulate` and
`accel-plugins generic` (fake /dev) as real processes with ``--registration
plugin-watcher``, against the emulator's plugin watcher. Registered; registered
again after emulator restarts; after a SIGKILL and a new process, registered again
with the same device IDs; SIGTERM removes both sockets.
"""

from __future__ import annotations

import asyncio
import signal
import stat
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from accel_plugins.kubelet_emulator import Kubelet, PluginClient
from accel_plugins.runtime.server import socket_name
from tests.reliability.plugin_process import (
    START_TIMEOUT,
    Node,
    PluginProcesses,
    generic_node,
    nvidia_node,
    our_sockets,
    ready,
)
from tests.support.cli import run_cli

NODES = [
    pytest.param(lambda root: nvidia_node("dgx-h100", devices=8), id="nvidia-simulated"),
    pytest.param(generic_node, id="generic-fake-dev"),
]
MakeNode = Callable[[Path], Node]


@pytest.fixture
async def plugins(kubelet_dir: Path, tmp_path: Path) -> AsyncIterator[PluginProcesses]:
    processes = PluginProcesses(kubelet_dir, tmp_path)
    yield processes
    await processes.stop_all()


def watched(registry: Path) -> tuple[str, ...]:
    return ("--registration", "plugin-watcher", "--plugins-registry-dir", str(registry))


def watched_ready(node: Node, registrations: int = 0) -> Callable[[Kubelet], bool]:
    """Registered by the plugin watcher beyond ``registrations``, all devices healthy."""
    return ready(node, registrations, source="plugin watcher")


@pytest.mark.parametrize("make_node", NODES)
async def test_registered_through_restarts_and_a_sigkill(
    watching_kubelet: Kubelet,
    registry_dir: Path,
    plugins: PluginProcesses,
    tmp_path: Path,
    make_node: MakeNode,
) -> None:
    node = make_node(tmp_path)
    first = await plugins.spawn(node, *watched(registry_dir))
    await watching_kubelet.wait_for(watched_ready(node), START_TIMEOUT)
    ids = sorted(watching_kubelet.resources[node.resource].devices)
    held = await watching_kubelet.allocate("pod", "main", node.resource, 1)
    (registration,) = our_sockets(registry_dir)
    (endpoint,) = our_sockets(watching_kubelet.plugin_dir)
    assert registration.name == endpoint.name
    assert watching_kubelet.registrations[-1].endpoint == str(endpoint)
    assert stat.S_IMODE(registration.stat().st_mode) == 0o600
    assert not any(r.source == "register" for r in watching_kubelet.registrations)

    # Emulator restarts: the device plugin socket is wiped, the registry is not.
    for _ in range(3):
        registrations = len(watching_kubelet.registrations)
        await watching_kubelet.restart()
        await watching_kubelet.wait_for(watched_ready(node, registrations), START_TIMEOUT)
        assert sorted(watching_kubelet.resources[node.resource].devices) == ids

    # SIGKILL: both socket files stay behind, nobody answers there.
    first.send_signal(signal.SIGKILL)
    assert await first.wait() == -signal.SIGKILL
    await watching_kubelet.wait_for(lambda k: not k.resources[node.resource].connected)
    assert our_sockets(registry_dir) == [registration]
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_unix_connection(registration)

    registrations = len(watching_kubelet.registrations)
    second = await plugins.spawn(node, *watched(registry_dir))
    await watching_kubelet.wait_for(watched_ready(node, registrations), START_TIMEOUT)
    assert sorted(watching_kubelet.resources[node.resource].devices) == ids
    assert our_sockets(registry_dir) == [registration]  # replaced by a live one
    assert watching_kubelet.allocations == [held]
    async with PluginClient(endpoint) as client:
        assert await client.allocate([list(held.device_ids)]) == [held.response]

    # SIGTERM: both sockets removed, the kubelet lets go.
    second.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(second.wait(), timeout=5.0) == 0
    assert our_sockets(registry_dir) == []
    assert our_sockets(watching_kubelet.plugin_dir) == []
    await watching_kubelet.wait_for(lambda k: not k.resources[node.resource].connected)
    assert "Traceback" not in plugins.output(first) + plugins.output(second)


async def test_the_emulator_command_registers_a_plugin_process(
    kubelet_dir: Path, registry_dir: Path, plugins: PluginProcesses, tmp_path: Path
) -> None:
    """`accel-plugins kubelet --plugins-registry-dir` against `accel-plugins nvidia`."""
    emulator = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "accel_plugins.cli.main",
        "kubelet",
        "--plugin-dir",
        str(kubelet_dir),
        "--plugins-registry-dir",
        str(registry_dir),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert emulator.stdout is not None
    seen: list[str] = []
    try:
        node = nvidia_node()
        await plugins.spawn(node, *watched(registry_dir))
        async with asyncio.timeout(START_TIMEOUT):
            while not seen or "by the plugin watcher" not in seen[-1]:
                line = await emulator.stdout.readline()
                assert line, f"the emulator exited: {seen}"
                seen.append(line.decode())
        endpoint = kubelet_dir / socket_name(node.resource)
        assert seen[-1].startswith(f"registered {node.resource} at {endpoint}")
    finally:
        emulator.send_signal(signal.SIGTERM)
        await asyncio.wait_for(emulator.communicate(), timeout=5.0)
    assert emulator.returncode == 0


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(
            ["--plugins-registry-dir", "plugins_registry"],
            {},
            "argument --plugins-registry-dir: 'plugins_registry' must be an absolute path",
            id="relative-flag",
        ),
        pytest.param(
            [],
            {"ACCEL_PLUGINS_PLUGINS_REGISTRY_DIR": "rel/dir"},
            "environment variable ACCEL_PLUGINS_PLUGINS_REGISTRY_DIR='rel/dir': "
            "'rel/dir' must be an absolute path",
            id="relative-env",
        ),
        pytest.param(
            ["--registration", "watcher"],
            {},
            "argument --registration: invalid choice: 'watcher'",
            id="unknown-mode",
        ),
        pytest.param(
            [],
            {"ACCEL_PLUGINS_REGISTRATION": "both"},
            "environment variable ACCEL_PLUGINS_REGISTRATION='both': must be one of "
            "kubelet, plugin-watcher",
            id="unknown-mode-env",
        ),
        pytest.param(
            ["--registration", "plugin-watcher", "--plugins-registry-dir", "/tmp/same"],
            {"ACCEL_PLUGINS_PLUGIN_DIR": "/tmp/same"},
            "configuration error: --plugins-registry-dir: /tmp/same must differ from --plugin-dir",
            id="same-directory",
        ),
    ],
)
def test_bad_registration_flags_exit_2(
    argv: list[str], env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    done = run_cli("nvidia", "--simulate", "pcie-4gpu", "--metrics-address", "", *argv)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_the_emulator_refuses_a_relative_registry_dir(kubelet_dir: Path) -> None:
    done = run_cli("kubelet", "--plugin-dir", str(kubelet_dir), "--plugins-registry-dir", "reg")
    assert done.returncode == 2
    assert "'reg' must be an absolute path" in done.stderr


def test_help_lists_the_registration_flags_with_their_env_twins() -> None:
    done = run_cli("generic", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "--registration {kubelet,plugin-watcher}" in text
    assert "$ACCEL_PLUGINS_REGISTRATION; default kubelet" in text
    assert "$ACCEL_PLUGINS_PLUGINS_REGISTRY_DIR; default /var/lib/kubelet/plugins_registry" in text
