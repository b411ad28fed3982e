"""`accel-plugins demo`: a real plugin and an emulated kubelet, on any Linux machine.

Everything runs in this process over real unix sockets in a temp dir: the
kubelet emulator, the framework's manager and gRPC servers, the generic
backend on a built-in config of nodes every Linux machine has, and a
simulated NVIDIA node (``node.py``). This module runs the walkthrough in
order (its steps in ``walkthrough.py`` and ``highlights.py``), then keeps
serving until a signal, and cleans up either way.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import TextIO

from accel_plugins.demo import walkthrough
from accel_plugins.demo.highlights import Highlights, next_steps
from accel_plugins.demo.node import DemoNode
from accel_plugins.demo.output import Printer, quiet_logs
from accel_plugins.util.termstyle import Style


async def run_demo(
    *,
    once: bool,
    out: TextIO,
    dev_root: Path = Path("/dev"),
    metrics_host: str = "127.0.0.1",
    color: bool = False,
) -> int:
    """Walk through registration, devices, an allocation and metrics; then serve.

    With ``once`` it returns after the walkthrough; otherwise it keeps serving
    and printing the kubelet's events until cancelled (Ctrl-C). ``color`` adds
    ANSI colours (the CLI's --color decides); the text is the same without.
    """
    say = Printer(out, Style(color))
    node = DemoNode.set_up(dev_root, on_event=say.kubelet_event)
    highlights = Highlights.set_up(node.workdir, node.kubelet)
    walkthrough.introduce(say, node)
    with quiet_logs():
        try:
            await node.start()
            await highlights.start()
            walkthrough.show_registrations(say, node)
            walkthrough.show_devices(say, node)
            await walkthrough.allocate_demo_pod(say, node)
            walkthrough.show_gpus(say, node)
            await walkthrough.allocate_gpus(say, node)
            say.section("Topology-aware allocation")
            await highlights.topology(say, say.style)
            say.section("Hotplug")
            await highlights.hotplug(say, say.style)
            say.section("GPU health: an XID, then recovery")
            await highlights.health(say, say.style)
            await walkthrough.show_metrics(say, node, metrics_host)
            say.section("Next steps")
            next_steps(say, say.style)
            await _finish(say, node, once)
            return 0
        finally:
            await highlights.stop()
            say.events = False  # teardown's events are noise
            await node.tear_down()


async def _finish(say: Printer, node: DemoNode, once: bool) -> None:
    """With ``once``, say goodbye; else keep serving, echoing kubelet events, until a signal."""
    if once:
        say()
        say("done (--once); cleaning up")
        return
    assert node.generic_task is not None  # node.start ran
    say.section("Serving")
    say("  The plugin stays up; try, from another terminal:")
    endpoint = node.kubelet.plugin_dir / node.kubelet.registrations[0].endpoint
    say(f"    accel-plugins inspect {endpoint}")
    say("  kubelet events follow; Ctrl-C stops.")
    say.events = True
    await _until_signal(node.generic_task)
    say("stopping")


async def _until_signal(task: asyncio.Task[None]) -> None:
    """Wait for SIGINT/SIGTERM (or the task ending); a clean stop removes the temp dir."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
