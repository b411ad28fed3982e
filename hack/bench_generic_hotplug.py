#!/usr/bin/env python3
"""Hotplug latency of the generic backend: device node change -> kubelet ListAndWatch.

Usage: hack/bench_generic_hotplug.py [--rounds N] [--source inotify|umockdev] [--json]

inotify (default): a fake /dev in a temp dir; each round creates a node with
  mknod (needs root) and later removes it, timing from the syscall until the
  kubelet emulator has the new device list (Healthy device added, or the
  device reported Unhealthy). The path is the real one: inotify -> rescan ->
  manager -> gRPC ListAndWatch stream -> emulator.
umockdev: the backend and manager run under umockdev-wrapper (Debian package
  umockdev); each round adds a tty device with an "add" uevent and removes it
  with "remove", timing from the command until the kubelet has the change.
  This includes the JSON round trip to the harness process.

The goal is 100 ms. A benchmark, not a test: it prints and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings  # noqa: E402
from accel_plugins.backends.generic.config import parse_config  # noqa: E402
from accel_plugins.backends.generic.monitor import UdevSource  # noqa: E402
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings  # noqa: E402
from accel_plugins.kubelet_emulator import Kubelet  # noqa: E402

GOAL_MS = 100.0
RESOURCE = "accel-plugins.io/serial"
CONFIG = "devices: [{name: serial, groups: [{paths: [{path: /dev/ttyBENCH*}]}]}]"
UDEV_CONFIG = "devices: [{name: serial, groups: [{udev: [{subsystem: tty, kernel: ttyBENCH*}]}]}]"


def healthy_count(kubelet: Kubelet) -> int:
    view = kubelet.resources.get(RESOURCE)
    return 0 if view is None else view.allocatable


async def timed(change: Awaitable[None], kubelet: Kubelet, want: int) -> float:
    """Milliseconds from starting ``change`` until the kubelet has ``want`` healthy devices."""
    start = time.perf_counter()
    await change
    await kubelet.wait_for(lambda k: healthy_count(k) == want, timeout=10)
    return (time.perf_counter() - start) * 1000


async def bench_inotify(rounds: int, workdir: Path) -> dict[str, list[float]]:
    dev = workdir / "dev"
    dev.mkdir()
    plugin_dir = workdir / "plugins"
    settings = GenericSettings(dev_root=dev, sys_root=workdir / "sys", udev_source=UdevSource.OFF)
    config = parse_config(CONFIG, "bench")
    manager = Manager(lambda: GenericBackend(config, settings), ManagerSettings(plugin_dir))
    samples: dict[str, list[float]] = {"add": [], "remove": []}
    async with Kubelet(plugin_dir) as kubelet:
        task = asyncio.create_task(manager.run())
        try:
            await kubelet.wait_for_resource(RESOURCE, timeout=10)
            node = dev / "ttyBENCH0"

            async def add() -> None:
                os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(188, 0))

            async def remove() -> None:
                node.unlink()

            for _ in range(rounds):
                samples["add"].append(await timed(add(), kubelet, 1))
                samples["remove"].append(await timed(remove(), kubelet, 0))
        finally:
            await manager.stop()
            await task
    return samples


async def bench_umockdev(rounds: int, workdir: Path) -> dict[str, list[float]]:
    from tests.fixtures.generic import UmockdevHarness, umockdev_problem

    problem = umockdev_problem()
    if problem:
        raise SystemExit(f"cannot run the umockdev benchmark: {problem}")
    plugin_dir = workdir / "plugins"
    plugin_dir.mkdir()

    def record(i: int) -> str:
        # A new name each round: umockdev cannot re-create a removed device's node.
        return (
            f"P: /devices/virtual/tty/ttyBENCH{i}\nN: ttyBENCH{i}\nE: SUBSYSTEM=tty\n"
            f"E: DEVNAME=/dev/ttyBENCH{i}\nA: dev=188:{i}\n"
        )

    samples: dict[str, list[float]] = {"add": [], "remove": []}
    async with Kubelet(plugin_dir) as kubelet:
        harness = await UmockdevHarness.spawn()
        try:
            await harness.start(UDEV_CONFIG, udev_source="kernel", plugin_dir=plugin_dir)
            await kubelet.wait_for_resource(RESOURCE, timeout=20)
            for i in range(rounds):
                syspath = f"/sys/devices/virtual/tty/ttyBENCH{i}"
                added = harness.add(record(i), uevent=syspath)
                samples["add"].append(await timed(added, kubelet, 1))
                samples["remove"].append(await timed(harness.remove(syspath), kubelet, 0))
        finally:
            await harness.close()
    return samples


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "min_ms": round(ordered[0], 2),
        "median_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 2),
        "max_ms": round(ordered[-1], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--source", choices=["inotify", "umockdev"], default="inotify")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-hp-", dir="/tmp"))
    try:
        bench = bench_inotify if args.source == "inotify" else bench_umockdev
        try:
            samples = asyncio.run(bench(args.rounds, workdir))
        except PermissionError as exc:
            raise SystemExit(f"mknod needs root (CAP_MKNOD): {exc}") from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "source": args.source,
        "rounds": args.rounds,
        "goal_ms": GOAL_MS,
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        ),
        **{event: summary(values) for event, values in samples.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"generic hotplug -> kubelet ListAndWatch ({args.source}, {args.rounds} rounds)")
    print(f"machine: {result['machine']}")
    for event in ("add", "remove"):
        s = summary(samples[event])
        verdict = "ok" if s["p95_ms"] <= GOAL_MS else "MISS"
        print(
            f"  {event:<7} min {s['min_ms']:7.2f} ms  median {s['median_ms']:7.2f} ms  "
            f"p95 {s['p95_ms']:7.2f} ms  max {s['max_ms']:7.2f} ms  "
            f"goal p95 <= {GOAL_MS:.0f} ms: {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
