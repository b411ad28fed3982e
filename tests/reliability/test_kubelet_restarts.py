"""A hundred kubelet restarts: the plugin re-registers after every one, holds no more
descriptors, sockets or threads than before, and allocations made before still hold.

The restarts are the emulator's own (stop, wipe every socket but the
checkpoint, start), so the plugin sees what it sees on a node: its socket
vanishes and kubelet.sock comes back. Both sides live in this process, so a
leak on either side shows in the counts.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest

from accel_plugins.kubelet_emulator import InsufficientDevicesError, Kubelet, PluginClient
from accel_plugins.plugin.device import Device, tree
from tests.fixtures.framework import ScriptedBackend, StartManager
from tests.reliability.process_usage import Usage, usage

WIDGET = "example.com/widget"
DEVICES = 4
RESTARTS = 100
WARM_UP = 5
# Room for what gRPC creates lazily (a poller, a resolver thread) and settles later.
SLACK = Usage(fds=4, sockets=2, threads=2)


def serving(kubelet: Kubelet) -> bool:
    view = kubelet.resources.get(WIDGET)
    return view is not None and view.connected and view.allocatable == DEVICES


async def restart(kubelet: Kubelet) -> None:
    """One kubelet restart; returns once the plugin is registered and streaming again."""
    await kubelet.restart()
    # start() forgot every resource: connected again means registered after this restart.
    await kubelet.wait_for(serving, what=f"{WIDGET} re-registered with {DEVICES} devices")


async def test_a_hundred_kubelet_restarts(kubelet: Kubelet, start_manager: StartManager) -> None:
    backend = ScriptedBackend(
        tree({WIDGET: [Device(f"w{i}", numa_nodes=(0,)) for i in range(DEVICES)]})
    )
    manager = (await start_manager(backend)).manager
    await kubelet.wait_for(serving)
    held = await kubelet.allocate("trainer", "main", WIDGET, 2)

    for _ in range(WARM_UP):
        await restart(kubelet)
    before = usage()
    registrations = len(kubelet.registrations)

    for _ in range(RESTARTS):
        await restart(kubelet)
        assert kubelet.allocations == [held], "the checkpoint lost an allocation"

    assert len(kubelet.registrations) - registrations >= RESTARTS
    assert not kubelet.rejections
    grown = usage().grown_since(before)
    slack = asdict(SLACK)
    assert all(delta <= slack[name] for name, delta in grown.items()), (
        f"after {RESTARTS} restarts: {grown} more than before"
    )
    assert backend.runs == 1  # the backend never noticed

    # The allocation made before the restarts is still honoured.
    assert await kubelet.allocate("trainer", "main", WIDGET, 2) == held
    other = await kubelet.allocate("server", "main", WIDGET, 2)
    assert not set(other.device_ids) & set(held.device_ids)
    with pytest.raises(InsufficientDevicesError):
        await kubelet.allocate("third", "main", WIDGET, 1)
    # And the plugin still answers for those devices exactly as it did.
    endpoint = kubelet.plugin_dir / kubelet.registrations[-1].endpoint
    async with PluginClient(endpoint) as client:
        assert await client.allocate([list(held.device_ids)]) == [held.response]
    status = manager.status()[WIDGET]
    assert (status.serving, status.registered) == (True, True)
