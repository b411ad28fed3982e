"""Benchmark sections: how fast a device change reaches the kubelet.

- ``hotplug``: a /dev node created or removed under the generic backend's fake
  /dev, until the kubelet emulator's ListAndWatch view has the change
  (inotify -> rescan -> manager -> gRPC stream). Needs root for mknod.
- ``health``: an XID on a simulated 8-GPU node until the kubelet sees the GPU
  Unhealthy, and the end of the quiet period until it is Healthy again
  (reported as the delay beyond the configured quiet period).

Everything runs in this process on real unix sockets, like the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from bench_generic_hotplug import bench_inotify, bench_umockdev
from benchlib import Row, percentile

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.config.config import NvidiaSettings
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.backend import Backend

GPU = "nvidia.com/gpu"
HOTPLUG_GOAL_MS = 100.0
HEALTH_GOAL_MS = 100.0
QUIET_SECONDS = 0.2  # the recovery quiet period configured for the benchmark


async def bench_hotplug(args: argparse.Namespace, workdir: Path) -> list[Row]:
    rounds = 10 if args.quick else 50
    (workdir / "hotplug").mkdir()
    try:
        samples = await bench_inotify(rounds, workdir / "hotplug")
    except PermissionError:
        return [Row("hotplug (needs root for mknod): skipped", 0, "", "", None)]
    rows = _hotplug_rows("inotify", samples)
    if shutil.which("umockdev-wrapper") and not args.quick:
        (workdir / "uevent").mkdir()
        rows += _hotplug_rows("uevent", await bench_umockdev(rounds // 2, workdir / "uevent"))
    return rows


def _hotplug_rows(source: str, samples: dict[str, list[float]]) -> list[Row]:
    rows = []
    for event in ("add", "remove"):
        p50, p99 = percentile(samples[event], 50), percentile(samples[event], 99)
        name = f"generic hotplug ({source}) {event} -> kubelet"
        rows.append(Row(f"{name} (p50)", p50, "ms", "<= 100", p50 <= HOTPLUG_GOAL_MS))
        rows.append(Row(f"{name} (p99)", p99, "ms", "<= 100", p99 <= HOTPLUG_GOAL_MS))
    return rows


@asynccontextmanager
async def serving(factory: Callable[[], Backend], plugin_dir: Path) -> AsyncIterator[Kubelet]:
    manager = Manager(factory, ManagerSettings(plugin_dir))
    async with Kubelet(plugin_dir) as kubelet:
        task = asyncio.create_task(manager.run())
        try:
            yield kubelet
        finally:
            await manager.stop()
            await task


async def bench_health(args: argparse.Namespace, workdir: Path) -> list[Row]:
    profile = load_profile("pcie-8gpu-nvlink-pairs")
    nvml = SimulatedNvml(profile)
    settings = NvidiaSettings(health_recovery_seconds=QUIET_SECONDS)
    rounds = 5 if args.quick else 20
    down: list[float] = []
    up: list[float] = []
    plugin_dir = workdir / "health"
    async with serving(lambda: NvidiaBackend(nvml, settings, wait_ms=50), plugin_dir) as kubelet:
        await kubelet.wait_for_resource(GPU, allocatable=8, timeout=20)
        for r in range(rounds):
            gpu = r % len(profile.gpus)
            start = time.perf_counter()
            nvml.inject_xid(gpu, 48)  # double-bit ECC error: critical
            await kubelet.wait_for(lambda k: k.resources[GPU].allocatable == 7, timeout=10)
            marked = time.perf_counter()
            down.append((marked - start) * 1000)
            await kubelet.wait_for(lambda k: k.resources[GPU].allocatable == 8, timeout=10)
            up.append((time.perf_counter() - marked - QUIET_SECONDS) * 1000)
    down_p50, down_max = percentile(down, 50), max(down)
    up_p50 = percentile(up, 50)
    return [
        Row("XID -> kubelet sees Unhealthy (p50)", down_p50, "ms", "<= 100", down_p50 <= 100),
        Row("XID -> kubelet sees Unhealthy (max)", down_max, "ms", "<= 100", down_max <= 100),
        Row("recovery: Healthy after quiet period (p50)", up_p50, "ms", "", None),
    ]
