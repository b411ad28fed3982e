"""A resource whose socket cannot be served must not take the others (or the plugin) down.

Two ways a socket fails on a node: something else occupies its path, and a
starting kubelet wipes the directory while the plugin is binding. Either way
the plugin logs it, serves every other resource, and serves the failed one as
soon as the next socket check finds the way clear.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.device import Device, tree
from accel_plugins.runtime.server import socket_name
from tests.fixtures.framework import LogWaiter, ScriptedBackend, StartManager

RESOURCES = ["example.com/a", "example.com/b", "example.com/c"]


def backend() -> ScriptedBackend:
    return ScriptedBackend(tree({r: [Device("d0")] for r in RESOURCES}))


def served(*resources: str) -> Callable[[Kubelet], bool]:
    def check(k: Kubelet) -> bool:
        return all(r in k.resources and k.resources[r].allocatable == 1 for r in resources)

    return check


async def test_an_occupied_socket_path_does_not_block_the_other_resources(
    kubelet: Kubelet, start_manager: StartManager, logs: LogWaiter
) -> None:
    blocked = kubelet.plugin_dir / socket_name(RESOURCES[0])
    blocked.mkdir()  # not ours to remove
    running = await start_manager(backend())

    await kubelet.wait_for(served(*RESOURCES[1:]), what="the other resources served")
    message = await logs.wait_for(str(blocked))
    assert "cannot remove" in message
    assert RESOURCES[0] not in kubelet.resources
    assert not running.task.done()

    blocked.rmdir()  # the way is clear: the directory watch notices
    await kubelet.wait_for(served(*RESOURCES))


async def test_a_kubelet_wiping_the_directory_while_the_plugin_starts(
    start_manager: StartManager, kubelet_dir: Path
) -> None:
    plugin = backend()
    running = await start_manager(plugin)
    await plugin.started.wait()  # the manager now binds its sockets, one per resource...
    async with Kubelet(kubelet_dir) as kubelet:  # ...while the kubelet's start deletes them
        await kubelet.wait_for(served(*RESOURCES), timeout=10)
    assert not running.task.done(), "the plugin survived"
