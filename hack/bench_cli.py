"""Benchmark section ``cli``: the real ``accel-plugins`` processes an operator runs.

Each vendor command is started as a subprocess against the kubelet emulator,
metrics on: the NVIDIA plugin on a simulated 8-GPU node (``--simulate``, so
the NVML bindings are imported but no GPU is needed) and the generic plugin
on 16 nodes under a temporary /dev. Measured: start until the kubelet has
the devices, memory after a /metrics scrape, idle CPU, and SIGKILL followed
by a fresh start until the kubelet has the same devices again (stale socket
removed by the new process).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import stat
import sys
import time
import urllib.request
from pathlib import Path

from benchlib import Row, cpu_seconds, rss_mb

from accel_plugins.kubelet import Kubelet

ROOT = Path(__file__).resolve().parent.parent
GENERIC_CONFIG = "devices: [{name: accel, groups: [{paths: [{path: /dev/bench*}]}]}]\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def commands(workdir: Path) -> dict[str, tuple[str, int, list[str]]]:
    """vendor -> (resource, device count, arguments after the vendor command).

    The generic plugin needs 16 real device nodes: without root (mknod) it is left out.
    """
    found = {"nvidia": ("nvidia.com/gpu", 8, ["--simulate", "pcie-8gpu-nvlink-pairs"])}
    dev = workdir / "dev"
    dev.mkdir()
    try:
        for i in range(16):
            os.mknod(dev / f"bench{i}", 0o600 | stat.S_IFCHR, os.makedev(240, i))
    except PermissionError:
        return found
    config = workdir / "generic.yaml"
    config.write_text(GENERIC_CONFIG)
    found["generic"] = (
        "accel-plugins.io/accel",
        16,
        ["--config", str(config), "--dev-root", str(dev), "--sys-root", str(workdir / "sys")],
    )
    return found


async def run_vendor(
    vendor: str, resource: str, count: int, extra: list[str], workdir: Path, idle: float
) -> list[Row]:
    plugin_dir = workdir / f"{vendor}-plugins"
    port = free_port()
    argv = [
        str(Path(sys.executable).parent / "accel-plugins"),  # the installed console script
        vendor,
        "--plugin-dir",
        str(plugin_dir),
        "--metrics-address",
        f"127.0.0.1:{port}",
        "--pod-resources-socket",
        str(workdir / f"{vendor}-pod-resources.sock"),
        "--log-level",
        "warning",
        *extra,
    ]

    async def start() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(*argv, cwd=ROOT)

    rows: list[Row] = []
    async with Kubelet(plugin_dir) as kubelet:
        began = time.perf_counter()
        child = await start()
        try:
            await kubelet.wait_for_resource(resource, allocatable=count, timeout=60)
            cold = (time.perf_counter() - began) * 1000
            ids = kubelet.resources[resource].healthy
            url = f"http://127.0.0.1:{port}/metrics"
            await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
            rss = rss_mb(child.pid)
            cpu0, wall0 = cpu_seconds(child.pid), time.monotonic()
            await asyncio.sleep(idle)
            cpu = (cpu_seconds(child.pid) - cpu0) / (time.monotonic() - wall0) * 100
            seen = len(kubelet.registrations)
            child.send_signal(signal.SIGKILL)
            await child.wait()
            began = time.perf_counter()
            child = await start()
            await kubelet.wait_for(
                lambda k: len(k.registrations) > seen and k.resources[resource].healthy == ids,
                timeout=60,
            )
            again = (time.perf_counter() - began) * 1000
        finally:
            if child.returncode is None:
                child.terminate()
                await child.wait()
    rows.append(
        Row(f"{vendor}: process start -> devices at kubelet", cold, "ms", "<= 2000", cold <= 2000)
    )
    rows.append(Row(f"{vendor}: RSS after a scrape", rss, "MB", "<= 60", rss <= 60))
    rows.append(Row(f"{vendor}: idle CPU over {idle:.0f} s", cpu, "% core", "<= 0.1", cpu <= 0.1))
    rows.append(
        Row(f"{vendor}: SIGKILL, restart -> same devices", again, "ms", "<= 2000", again <= 2000)
    )
    return rows


async def bench_cli(args: argparse.Namespace, workdir: Path) -> list[Row]:
    idle = 5.0 if args.quick else float(args.idle_seconds)
    rows: list[Row] = []
    for vendor, (resource, count, extra) in commands(workdir).items():
        rows += await run_vendor(vendor, resource, count, extra, workdir, idle)
    return rows
