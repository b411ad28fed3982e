"""``serve``: the emulator as a long-running process that reports events (the CLI's kubelet)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from accel_plugins.kubelet_emulator import serve
from tests.fixtures.kubelet import RESOURCE, MakePlugin, widgets


class Lines:
    """Collects event lines and lets the test await one containing a text."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, text: str) -> str:
        async with asyncio.timeout(5):
            while not any(text in line for line in self.lines):
                await self._changed.wait()
        return next(line for line in self.lines if text in line)


async def test_serve_reports_registration_devices_and_stream_end(
    kubelet_dir: Path, make_plugin: MakePlugin
) -> None:
    lines = Lines()
    pod_resources = kubelet_dir / "pod-resources" / "kubelet.sock"
    task = asyncio.create_task(
        serve(kubelet_dir, pod_resources_socket=pod_resources, on_event=lines)
    )
    await lines.wait_for("registration service listening")
    assert pod_resources.exists()

    plugin = await make_plugin(widgets(2, unhealthy=["w1"]))
    await plugin.register(kubelet_dir / "kubelet.sock")
    assert (await lines.wait_for("registered")).startswith(f"registered {RESOURCE} at widget.sock")
    assert (await lines.wait_for("devices")) == (f"{RESOURCE}: 2 devices (1 healthy); added w0, w1")
    plugin.end_streams()
    await lines.wait_for("ListAndWatch stream ended")

    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert lines.lines[-1] == "kubelet stopped"
