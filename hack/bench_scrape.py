"""Benchmark section ``scrape``: one /metrics scrape of a large node, over HTTP.

The node: a simulated NVIDIA node with 8 GPUs (``dgx-h100``) and the generic
backend on 10,000 device nodes under a temporary /dev (mknod; without
CAP_MKNOD a fixed backend publishes 10,000 devices of the same shape), both
served by real managers registered with the kubelet emulator and scraped
through one metrics server, as if one process served the whole node. Pod
attribution is on: the emulator's PodResources API reports 1,000 generic
devices and all 8 GPUs held by pods. Timed: from sending GET /metrics until
the last byte of the answer arrived. Goal: p50 and max <= 100 ms, for a node
at rest (the device series' text is cached) and right after a pod left (all
10,000 generic device series written again).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from benchlib import Row, percentile
from prometheus_client import CollectorRegistry

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.monitor import UdevSource
from accel_plugins.backends.nvidia.factory import simulated_backend
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.metrics import MetricsServer, PrometheusMetrics, watch_manager
from accel_plugins.plugin.backend import Backend, Publish
from accel_plugins.plugin.device import Device, DeviceNode, DeviceTree
from accel_plugins.runtime.podresources import PodResourcesCache
from accel_plugins.runtime.recorder import PluginStatus
from accel_plugins.runtime.reload_status import ReloadStatus

GOAL_MS = 100.0
DEVICES = 10_000
GENERIC = "accel-plugins.io/accel"
GPU = "nvidia.com/gpu"
CONFIG = "devices: [{name: accel, groups: [{paths: [{path: /dev/bench*}]}]}]"


class FixedBackend:
    """Stands in for the generic backend where device nodes cannot be made."""

    def __init__(self, devices: Mapping[str, Device]) -> None:
        self.devices = devices

    async def run(self, publish: Publish) -> None:
        publish({GENERIC: dict(self.devices)})
        await asyncio.Event().wait()


def generic_factory(workdir: Path) -> tuple[Callable[[], Backend], str]:
    dev = workdir / "dev"
    dev.mkdir()
    try:
        for i in range(DEVICES):
            os.mknod(dev / f"bench{i}", 0o600 | stat.S_IFCHR, os.makedev(240, i % 256))
    except PermissionError:
        fixed = {
            f"d{i}": Device(f"d{i}", nodes=(DeviceNode(f"/dev/bench{i}"),)) for i in range(DEVICES)
        }
        return (lambda: FixedBackend(fixed)), "fixed backend"
    config = parse_config(CONFIG, "bench")
    settings = GenericSettings(dev_root=dev, sys_root=workdir / "sys", udev_source=UdevSource.OFF)
    return (lambda: GenericBackend(config, settings)), "generic backend"


class NodeView:
    """Both managers as one, for one metrics server (the GPU series come from NVIDIA's)."""

    def __init__(self, generic: Manager, nvidia: Manager) -> None:
        self._managers = (generic, nvidia)
        self._nvidia = nvidia

    def status(self) -> Mapping[str, PluginStatus]:
        return {k: v for m in self._managers for k, v in m.status().items()}

    @property
    def tree(self) -> DeviceTree:
        return {k: v for m in self._managers for k, v in m.tree.items()}

    @property
    def backend(self) -> object:
        return self._nvidia.backend

    @property
    def reload_status(self) -> ReloadStatus:
        return self._nvidia.reload_status


async def scrape(host: str, port: int) -> tuple[float, int]:
    """Milliseconds from the request to the last byte, and the body's size."""
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    elapsed = (time.perf_counter() - start) * 1000
    writer.close()
    await writer.wait_closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"scrape failed: {head.decode(errors='replace')}")
    return elapsed, len(body)


async def bench_scrape(args: argparse.Namespace, workdir: Path) -> list[Row]:
    rounds = 10 if args.quick else 50
    plugin_dir = workdir / "scrape-plugins"
    factory, source = generic_factory(workdir)
    registry = CollectorRegistry(auto_describe=False)
    recorder = PrometheusMetrics(registry)
    settings = ManagerSettings(plugin_dir=plugin_dir)
    generic = Manager(factory, settings, metrics=recorder)
    nvidia = Manager(lambda: simulated_backend("dgx-h100"), settings, metrics=recorder)
    async with Kubelet(plugin_dir, pod_resources_socket=workdir / "pod-resources.sock") as kubelet:
        assert kubelet.pod_resources_socket is not None
        pods = PodResourcesCache(kubelet.pod_resources_socket)
        view = NodeView(generic, nvidia)
        watch_manager(registry, view, pods)
        server = MetricsServer(registry, generic.problems, before_scrape=[pods.touch])
        tasks = [asyncio.create_task(generic.run()), asyncio.create_task(nvidia.run())]
        try:
            await kubelet.wait_for_resource(GENERIC, allocatable=DEVICES, timeout=60)
            await kubelet.wait_for_resource(GPU, allocatable=8, timeout=30)
            for i in range(100):
                await kubelet.allocate(f"job-{i}", "main", GENERIC, 10, namespace="batch")
            for i in range(4):
                await kubelet.allocate(f"train-{i}", "trainer", GPU, 2, namespace="ml")
            await pods.refresh()
            host, port = await server.start("127.0.0.1", 0)
            for _ in range(3):  # warm-up: first-scrape allocations, thread pool start
                await scrape(host, port)
            samples: list[float] = []
            size = 0
            for _ in range(rounds):
                elapsed, size = await scrape(host, port)
                samples.append(elapsed)
            changed: list[float] = []
            for i in range(rounds):
                kubelet.release(f"job-{i}", namespace="batch")  # attribution changes
                await pods.refresh()
                changed.append((await scrape(host, port))[0])
            series = sum(len(m.samples) for m in registry.collect())
        finally:
            await server.stop()
            await generic.stop()
            await nvidia.stop()
            for task in tasks:
                await task
    name = f"scrape 8 GPUs + {DEVICES // 1000}k devices"
    if source != "generic backend":
        name += f" ({source})"
    rows = []
    for label, values in (("", samples), (", after a pod change,", changed)):
        p50, worst = percentile(values, 50), max(values)
        rows.append(Row(f"{name}{label} p50", p50, "ms", f"<= {GOAL_MS:g}", p50 <= GOAL_MS))
        rows.append(Row(f"{name}{label} max", worst, "ms", f"<= {GOAL_MS:g}", worst <= GOAL_MS))
    return [
        *rows,
        Row("scrape: body size", size / 1e6, "MB", "", None),
        Row("scrape: series", float(series), "samples", "", None),
    ]


if __name__ == "__main__":
    import logging
    import sys
    import tempfile

    logging.basicConfig(level=logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true")
    with tempfile.TemporaryDirectory(prefix="bench-scrape-", dir="/tmp") as tmp:
        rows = asyncio.run(bench_scrape(parser.parse_args(), Path(tmp)))
    for row in rows:
        print(f"{row.name:<50} {row.value:10.3f} {row.unit:<8} {row.goal:<8} {row.status()}")
    sys.exit(0)
