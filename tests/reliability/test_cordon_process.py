"""One cordon, device-plugin mode, as an operator does it: `accel-plugins cordon` on the node.

`accel-plugins nvidia` runs as a process on the simulated pcie-4gpu node with a
state directory of its own; the CLI edits the state file and the running plugin
follows it. The kubelet emulator sees the device Unhealthy, its Allocate is
refused with the operator's reason, /metrics (a real scrape) and `inspect` say
``cordoned``; the plugin restarted still serves it cordoned; uncordon restores it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from accel_plugins.kubelet_emulator import Kubelet, PluginCallError
from accel_plugins.runtime.server import socket_name
from tests.reliability.plugin_process import START_TIMEOUT, Node, PluginProcesses, ready
from tests.support.cli import free_port, http_get, run_cli_async

RESOURCE = "nvidia.com/gpu"


@pytest.fixture
async def plugins(kubelet_dir: Path, tmp_path: Path) -> AsyncIterator[PluginProcesses]:
    processes = PluginProcesses(kubelet_dir, tmp_path)
    yield processes
    await processes.stop_all()


def unhealthy_is(ids: set[str]) -> Callable[[Kubelet], bool]:
    def check(k: Kubelet) -> bool:
        view = k.resources.get(RESOURCE)
        return view is not None and view.connected and set(view.unhealthy) == ids

    return check


async def test_cordon_through_the_command_survives_a_restart(
    kubelet: Kubelet, plugins: PluginProcesses, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    port = free_port()
    argv = ["nvidia", "--simulate", "pcie-4gpu", "--state-dir", str(state)]
    node = Node([*argv, "--metrics-address", f"127.0.0.1:{port}"], RESOURCE, 4)
    first = await plugins.spawn(node)
    await kubelet.wait_for(ready(node), START_TIMEOUT)
    device = sorted(kubelet.resources[RESOURCE].devices)[1]

    code, out, err = await run_cli_async(
        "cordon", device, "--reason", "fan failing; ticket 42", "--state-dir", str(state)
    )
    assert code == 0, err
    assert out.startswith(f"cordoned {device}")
    await kubelet.wait_for(unhealthy_is({device}), START_TIMEOUT)

    # Refused, with the operator's words (the kubelet would report this on the pod).
    with pytest.raises(
        PluginCallError, match=r"cordoned device IDs '.+' \(fan failing; ticket 42\)"
    ):
        await kubelet.client(RESOURCE).allocate([[device]])
    status, metrics = await http_get(port, "/metrics")
    assert status == 200
    (series,) = [
        line
        for line in metrics.splitlines()
        if line.startswith("accel_plugins_device_health_reason{") and f'"{device}"' in line
    ]
    assert 'kind="cordoned"' in series
    assert series.endswith(" 1.0")
    code, out, err = await run_cli_async(
        "inspect",
        str(kubelet.plugin_dir / socket_name(RESOURCE)),
        "--metrics-address",
        f"127.0.0.1:{port}",
    )
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if device in line]
    assert "Unhealthy" in row
    assert "cordoned" in row

    # The state file outlives the plugin: the new process serves the cordon again.
    registrations = len(kubelet.registrations)
    first.send_signal(signal.SIGTERM)
    async with asyncio.timeout(START_TIMEOUT):
        assert await first.wait() == 0
    await plugins.spawn(node)
    await kubelet.wait_for(
        lambda k: len(k.registrations) > registrations and unhealthy_is({device})(k),
        START_TIMEOUT,
    )

    code, _, err = await run_cli_async("uncordon", device, "--state-dir", str(state))
    assert code == 0, err
    await kubelet.wait_for(unhealthy_is(set()), START_TIMEOUT)
    assert len(await kubelet.client(RESOURCE).allocate([[device]])) == 1
