"""Benchmark section ``cli``: the real ``accel-plugins`` processes an operator runs.

Each vendor command is started as a subprocess against the kubelet emulator,
metrics on: the NVIDIA plugin on a simulated 8-GPU node (``--simulate``, so
the NVML bindings are imported but no GPU is needed; ``--real-gpu`` runs it on
this machine's driver and GPUs instead) and the generic plugin
on 16 nodes under a temporary /dev. Measured: start until the kubelet has
the devices, memory after a /metrics scrape, idle CPU, and SIGKILL followed
by a fresh start until the kubelet has the same devices again (stale socket
removed by the new process).

Each figure stands beside Python's floor, measured in the same run: a process
that imports grpc and prometheus_client and starts a grpc.aio server on a
unix socket (exec until it serves, its RSS, its idle CPU, and its idle CPU
while a client holds one stream open, as the kubelet holds ListAndWatch: gRPC's
event engine works for an open connection). The goals are ratios to that
floor: start-up <= 1.5x, RSS <= floor + 8 MB, idle <= 0.05 %. With
``--real-gpu`` the NVIDIA figures stand beside the floor with NVML initialised.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import socket
import stat
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc
from benchlib import Row, cpu_seconds, rss_mb

from accel_plugins.kubelet_emulator import Kubelet

ROOT = Path(__file__).resolve().parent.parent
FLOOR_CHILD = """
import asyncio, sys
import grpc, prometheus_client

async def stream(request, context):  # the kubelet's ListAndWatch: one answer, then open
    yield b"devices"
    await asyncio.Event().wait()

async def main():
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "floor", {"Watch": grpc.unary_stream_rpc_method_handler(stream)}),))
    server.add_insecure_port("unix:" + sys.argv[1])
    await server.start()
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""
PRECOMPILE = """
import compileall, os, accel_plugins
compileall.compile_dir(os.path.dirname(accel_plugins.__file__), quiet=1)
from accel_plugins.util import codecache
codecache.build()
"""
# The floor of any process that lists GPUs: the same, with NVML initialised first and
# kept open, as every NVIDIA plugin (Go or Python) has it (``--real-gpu``).
FLOOR_NVML_CHILD = FLOOR_CHILD.replace(
    "async def main():",
    "import pynvml\npynvml.nvmlInit()\npynvml.nvmlDeviceGetCount()\n\nasync def main():",
)


@dataclass(frozen=True)
class Floor:
    start_ms: float
    rss_mb: float
    idle_pct: float
    idle_stream_pct: float  # idle while a client holds one stream open, as the kubelet does


STARTS = 5  # the best of this many starts, for the floor and for each plugin alike
SETTLE = 3.0  # seconds between a plugin's first scrape and its idle window


async def measure_floor(
    workdir: Path, idle: float, runs: int = STARTS, child_source: str = FLOOR_CHILD
) -> Floor:
    """The bare Python gRPC process: best of ``runs`` starts, then its RSS and idle CPU."""
    starts: list[float] = []
    for n in range(runs):
        began = time.perf_counter()
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", child_source, str(workdir / f"floor{n}.sock"),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert child.stdout is not None
        assert (await child.stdout.readline()).strip() == b"ready"
        starts.append((time.perf_counter() - began) * 1000)
        if n < runs - 1:
            child.kill()
            await child.wait()
    try:
        await asyncio.sleep(1.0)
        rss = rss_mb(child.pid)
        cpu = await idle_cpu(child.pid, idle)
        # gRPC's event engine works for an open HTTP/2 connection even while nothing is
        # sent; every plugin has one (the kubelet's ListAndWatch), so its floor has one too.
        target = "unix:" + str(workdir / f"floor{runs - 1}.sock")
        async with grpc.aio.insecure_channel(target) as channel:
            call = channel.unary_stream("/floor/Watch", None, None)(b"")
            await call.read()
            cpu_stream = await idle_cpu(child.pid, idle)
            call.cancel()
    finally:
        child.kill()
        await child.wait()
    return Floor(min(starts), rss, cpu, cpu_stream)


async def idle_cpu(pid: int, seconds: float) -> float:
    """Percent of a core ``pid`` used over the next ``seconds``."""
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    return (cpu_seconds(pid) - cpu0) / (time.monotonic() - wall0) * 100


GENERIC_CONFIG = "devices: [{name: accel, groups: [{paths: [{path: /dev/bench*}]}]}]\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@functools.cache
def real_gpus() -> int:
    """How many GPUs this machine's driver lists (``--real-gpu``)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def commands(workdir: Path, real_gpu: bool) -> dict[str, tuple[str, int, list[str]]]:
    """vendor -> (resource, device count, arguments after the vendor command).

    The generic plugin needs 16 real device nodes: without root (mknod) it is left out.
    """
    nvidia = ("nvidia.com/gpu", 8, ["--simulate", "pcie-8gpu-nvlink-pairs"])
    if real_gpu:
        nvidia = ("nvidia.com/gpu", real_gpus(), [])
    found = {"nvidia": nvidia}
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


@dataclass(frozen=True)
class Launch:
    """One plugin program to start, and what the kubelet must then have."""

    label: str
    argv: list[str]
    plugin_dir: Path
    resource: str
    count: int
    metrics_port: int | None = None
    goals: bool = True  # False for a peer: its figures stand beside ours, without goals


def our_launch(vendor: str, resource: str, count: int, extra: list[str], workdir: Path) -> Launch:
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
    return Launch(vendor, argv, plugin_dir, resource, count, port)


# NVIDIA's Go plugin puts its sockets in this fixed directory (no flag moves them).
PEER_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


def peer_launch(binary: Path, count: int) -> Launch:
    """NVIDIA's k8s-device-plugin binary on the same GPUs (``--peer-nvidia``; needs root)."""
    socket_path = PEER_PLUGIN_DIR / "kubelet.sock"
    argv = [str(binary), "--kubelet-socket", str(socket_path), "--fail-on-init-error=true"]
    return Launch("nvidia-go (peer)", argv, PEER_PLUGIN_DIR, "nvidia.com/gpu", count, goals=False)


def show_response(label: str, response: object) -> None:
    """What one container got, for comparing our Allocate answer with the peer's."""
    print(f"{label}: Allocate(1) -> {response}", file=sys.stderr)


async def preferred_figures(kubelet: Kubelet, resource: str) -> tuple[float, float] | None:
    """The first GetPreferredAllocation as soon as the kubelet has the devices, and the
    median of the next ten (issue 25: the first is to cost what later ones cost);
    None when the plugin does not offer the call."""
    client = kubelet.client(resource)
    if not (await client.options()).get_preferred_allocation_available:
        return None
    ids = sorted(kubelet.resources[resource].healthy)
    times: list[float] = []
    for _ in range(11):
        began = time.perf_counter()
        await client.preferred(ids, [], min(2, len(ids)))
        times.append((time.perf_counter() - began) * 1000)
    return times[0], statistics.median(times[1:])


async def run_vendor(launch: Launch, idle: float, floor: Floor) -> list[Row]:
    vendor, resource, count = launch.label, launch.resource, launch.count
    launch.plugin_dir.mkdir(parents=True, exist_ok=True)

    async def start() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(*launch.argv, cwd=ROOT)

    rows: list[Row] = []
    async with Kubelet(launch.plugin_dir) as kubelet:
        colds: list[float] = []
        for _ in range(STARTS):  # the same estimator as the floor's
            began = time.perf_counter()
            child = await start()
            await kubelet.wait_for_resource(resource, allocatable=count, timeout=60)
            colds.append((time.perf_counter() - began) * 1000)
            if len(colds) < STARTS:
                child.terminate()
                await child.wait()
                await kubelet.wait_for(lambda k: not k.resources[resource].connected)
        cold = min(colds)
        try:
            picks = await preferred_figures(kubelet, resource)
            ids = kubelet.resources[resource].healthy
            record = await kubelet.allocate("bench", "main", resource, 1)
            show_response(vendor, record.response)
            kubelet.release("bench")
            if launch.metrics_port is not None:
                url = f"http://127.0.0.1:{launch.metrics_port}/metrics"
                await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
            rss = rss_mb(child.pid)
            # Start-up ends with freezing the heap 2 s in (cli.FREEZE_HEAP_AFTER): not idle.
            await asyncio.sleep(SETTLE)
            cpu = await idle_cpu(child.pid, idle)
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
    start_ratio = cold / floor.start_ms
    rss_over = rss - floor.rss_mb

    def goal(text: str, ok: bool) -> tuple[str, bool | None]:
        return (text, ok) if launch.goals else ("", None)

    scraped = " after a scrape" if launch.metrics_port is not None else ""
    if picks is not None:
        rows += [
            Row(f"{vendor}: first GetPreferredAllocation after start", picks[0], "ms", "", None),
            Row(f"{vendor}: later GetPreferredAllocation p50", picks[1], "ms", "", None),
        ]
    rows += [
        Row(f"{vendor}: process start -> devices at kubelet", cold, "ms", "", None),
        Row(f"{vendor}: start / floor", start_ratio, "x", *goal("<= 1.5", start_ratio <= 1.5)),
        Row(f"{vendor}: RSS{scraped}", rss, "MB", "", None),
        Row(f"{vendor}: RSS - floor", rss_over, "MB", *goal("<= 8", rss_over <= 8)),
        Row(f"{vendor}: idle CPU over {idle:.0f} s", cpu, "% core", *goal("<= 0.05", cpu <= 0.05)),
        Row(
            f"{vendor}: idle - floor's with a stream",
            cpu - floor.idle_stream_pct,
            "% core",
            "",
            None,
        ),
        Row(
            f"{vendor}: SIGKILL, restart -> same devices",
            again,
            "ms",
            *goal("<= 2000", again <= 2000),
        ),
    ]
    return rows


async def bench_cli(args: argparse.Namespace, workdir: Path) -> list[Row]:
    idle = 5.0 if args.quick else float(args.idle_seconds)
    # Bytecode for the package the console script runs (this checkout when installed
    # editable), as the image has it: its modules' (its Dockerfile runs compileall, as the
    # floor's site-packages have them) and its dataclass methods' (accel_plugins.util.codecache).
    # With PYTHONDONTWRITEBYTECODE set, every start would otherwise compile from source.
    build = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PRECOMPILE, cwd="/", stdout=asyncio.subprocess.DEVNULL
    )
    assert await build.wait() == 0, "compiling the installed package failed"
    floor = await measure_floor(workdir, idle)
    rows = [
        Row("floor: python + grpc + prometheus_client", floor.start_ms, "ms", "reference", None),
        Row("floor: RSS", floor.rss_mb, "MB", "reference", None),
        Row(f"floor: idle CPU over {idle:.0f} s", floor.idle_pct, "% core", "reference", None),
        Row("floor: idle, one stream open", floor.idle_stream_pct, "% core", "reference", None),
    ]  # fmt: skip
    floors = {vendor: floor for vendor in ("nvidia", "generic")}
    if args.real_gpu:
        nvml = floors["nvidia"] = await measure_floor(workdir, idle, child_source=FLOOR_NVML_CHILD)
        rows += [
            Row("floor + NVML init: start", nvml.start_ms, "ms", "reference", None),
            Row("floor + NVML init: RSS", nvml.rss_mb, "MB", "reference", None),
            Row("floor + NVML init: idle CPU", nvml.idle_pct, "% core", "reference", None),
            Row(
                "floor + NVML: idle, one stream", nvml.idle_stream_pct, "% core", "reference", None
            ),
        ]
    for vendor, (resource, count, extra) in commands(workdir, args.real_gpu).items():
        launch = our_launch(vendor, resource, count, extra, workdir)
        rows += await run_vendor(launch, idle, floors[vendor])
    if args.peer_nvidia:
        rows += await run_vendor(peer_launch(args.peer_nvidia, real_gpus()), idle, floors["nvidia"])
    return rows
