"""Benchmark section ``admission``: what one pod admission costs the plugin, in RPCs and time.

The kubelet emulator admits pods (GetPreferredAllocation when the plugin
advertises it, then Allocate) against the framework serving two resources:
devices all on one NUMA node, where there is nothing to prefer, and devices
on two NUMA nodes, where the framework's NUMA policy chooses. The plugin's
own recorder counts the RPCs it served; each pod is released after its
admission so every round starts from the same state.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from benchlib import Row, percentile

from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.device import Device, DeviceNode, tree
from accel_plugins.runtime.recorder import NoMetrics

UNIFORM = "bench.example.com/uniform"
SPREAD = "bench.example.com/spread"


class Fixed:
    async def run(self, publish):  # type: ignore[no-untyped-def]
        def devices(prefix: str, numa: int) -> list[Device]:
            return [
                Device(f"{prefix}{i}", numa_nodes=(i % numa,), nodes=(DeviceNode("/dev/null"),))
                for i in range(8)
            ]

        publish(tree({UNIFORM: devices("u", 1), SPREAD: devices("s", 2)}))
        await asyncio.Event().wait()


class Calls(NoMetrics):
    def __init__(self) -> None:
        self.count = 0

    def rpc_finished(self, method: str, resource: str, seconds: float) -> None:
        self.count += 1


async def allocate_samples(
    plugin_dir: Path, rounds: int, resource: str = UNIFORM, *, count: int = 2
) -> list[float]:
    """Milliseconds per pod admitted by the emulator (``count`` devices of ``resource``),
    each pod released after."""
    async with Kubelet(plugin_dir) as kubelet:
        manager = Manager(Fixed, ManagerSettings(plugin_dir=plugin_dir), metrics=NoMetrics())
        task = asyncio.create_task(manager.run())
        try:
            await kubelet.wait_for_resource(resource, allocatable=8, timeout=30)
            samples: list[float] = []
            for n in range(rounds):
                start = time.perf_counter()
                await kubelet.allocate(f"pod-{n}", "main", resource, count)
                samples.append((time.perf_counter() - start) * 1000)
                kubelet.release(f"pod-{n}")
            return samples
        finally:
            await manager.stop()
            await task


async def bench_admission(args: argparse.Namespace, workdir: Path) -> list[Row]:
    rounds = 100 if args.quick else 1000
    plugin_dir = workdir / "plugins"
    calls = Calls()
    rows: list[Row] = []
    async with Kubelet(plugin_dir) as kubelet:
        manager = Manager(Fixed, ManagerSettings(plugin_dir=plugin_dir), metrics=calls)
        task = asyncio.create_task(manager.run())
        try:
            for resource in (UNIFORM, SPREAD):
                await kubelet.wait_for_resource(resource, allocatable=8, timeout=30)
            for resource, label in ((UNIFORM, "one NUMA node"), (SPREAD, "two NUMA nodes")):
                samples: list[float] = []
                before = calls.count
                for n in range(rounds):
                    pod = f"{label.replace(' ', '-')}-{n}"
                    start = time.perf_counter()
                    await kubelet.allocate(pod, "main", resource, 2)
                    samples.append((time.perf_counter() - start) * 1000)
                    kubelet.release(pod)
                per_pod = (calls.count - before) / rounds
                expected = 1.0 if resource == UNIFORM else 2.0
                rows += [
                    Row(
                        f"admission, {label}: RPCs per pod",
                        per_pod,
                        "rpc",
                        f"== {expected:g}",
                        per_pod == expected,
                    ),
                    Row(f"admission, {label}: p50", percentile(samples, 50), "ms", "", None),
                    Row(f"admission, {label}: p99", percentile(samples, 99), "ms", "", None),
                ]
        finally:
            await manager.stop()
            await task
    return rows
