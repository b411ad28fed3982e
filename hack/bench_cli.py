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
unix socket (exec until it serves, its RSS, its idle CPU, and its RSS and idle
CPU while a client holds one stream open, as the kubelet holds ListAndWatch on
every plugin: gRPC keeps buffers and its event engine works for an open
connection). The goals are ratios to that floor (issue 34): start-up <= 1.3x,
RSS <= floor + 7 MB (the floor with its stream open, as the plugin's RSS is
read with the kubelet's stream open; the difference to the bare floor is
printed too), idle <= 0.05 %. ``--rounds`` repeats floor and plugins, each
round side by side, and reports the median of the rounds with the worst beside
it. With ``--real-gpu`` the NVIDIA figures stand beside the floor with NVML
initialised.
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
    rss_stream_mb: float  # RSS with that stream open: what a plugin's RSS is read beside


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
            rss_stream = rss_mb(child.pid)
            call.cancel()
    finally:
        child.kill()
        await child.wait()
    return Floor(min(starts), rss, cpu, cpu_stream, rss_stream)


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


@dataclass(frozen=True)
class Run:
    """One plugin's figures in one round."""

    cold_ms: float  # best of STARTS: exec until the kubelet has the devices
    rss_mb: float  # after preferred allocation, Allocate and a scrape
    idle_pct: float
    restart_ms: float  # SIGKILL, then a fresh start until the kubelet has the same devices
    picks: tuple[float, float] | None  # first and later GetPreferredAllocation


async def run_vendor(launch: Launch, idle: float) -> Run:
    resource, count = launch.resource, launch.count
    launch.plugin_dir.mkdir(parents=True, exist_ok=True)

    async def start() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(*launch.argv, cwd=ROOT)

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
        try:
            picks = await preferred_figures(kubelet, resource)
            ids = kubelet.resources[resource].healthy
            record = await kubelet.allocate("bench", "main", resource, 1)
            show_response(launch.label, record.response)
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
    return Run(min(colds), rss, cpu, again, picks)


# Issue 34's budget: against the floor of the same round.
START_RATIO_GOAL = 1.3
RSS_OVER_GOAL_MB = 7.0


def info(name: str, value: float, unit: str) -> Row:
    return Row(name, value, unit, "", None)


def vendor_rows(
    label: str, runs: list[Run], floors: list[Floor], goals: bool, scraped: bool
) -> list[Row]:
    """The median over rounds of each figure, each round's plugin beside that round's floor."""
    median = statistics.median
    pairs = list(zip(runs, floors, strict=True))
    ratios = [r.cold_ms / f.start_ms for r, f in pairs]
    over = [r.rss_mb - f.rss_stream_mb for r, f in pairs]
    idle = median(r.idle_pct for r in runs)
    restart = median(r.restart_ms for r in runs)

    def goal(name: str, value: float, unit: str, text: str, ok: bool) -> Row:
        return Row(name, value, unit, text, ok) if goals else info(name, value, unit)

    rows: list[Row] = []
    picks = [r.picks for r in runs if r.picks is not None]
    if picks:
        first, later = median(p[0] for p in picks), median(p[1] for p in picks)
        rows += [
            info(f"{label}: first GetPreferredAllocation after start", first, "ms"),
            info(f"{label}: later GetPreferredAllocation p50", later, "ms"),
        ]
    worst = f" (worst of {len(runs)})"
    cold = median(r.cold_ms for r in runs)
    rss = median(r.rss_mb for r in runs)
    over_bare = median(r.rss_mb - f.rss_mb for r, f in pairs)
    idle_beside = median(r.idle_pct - f.idle_stream_pct for r, f in pairs)
    start_ok = median(ratios) <= START_RATIO_GOAL
    rss_ok = median(over) <= RSS_OVER_GOAL_MB
    return [
        *rows,
        info(f"{label}: process start -> devices at kubelet", cold, "ms"),
        goal(f"{label}: start / floor", median(ratios), "x", f"<= {START_RATIO_GOAL}", start_ok),
        info(f"{label}: start / floor{worst}", max(ratios), "x"),
        info(f"{label}: RSS{' after a scrape' if scraped else ''}", rss, "MB"),
        goal(f"{label}: RSS - floor", median(over), "MB", f"<= {RSS_OVER_GOAL_MB:g}", rss_ok),
        info(f"{label}: RSS - floor{worst}", max(over), "MB"),
        info(f"{label}: RSS - floor without its stream", over_bare, "MB"),
        goal(f"{label}: idle CPU", idle, "% core", "<= 0.05", idle <= 0.05),
        info(f"{label}: idle - floor's with a stream", idle_beside, "% core"),
        goal(
            f"{label}: SIGKILL, restart -> same devices", restart, "ms", "<= 2000", restart <= 2000
        ),
    ]


def floor_rows(label: str, floors: list[Floor]) -> list[Row]:
    def reference(name: str, values: list[float], unit: str) -> Row:
        return Row(f"{label}: {name}", statistics.median(values), unit, "reference", None)

    return [
        reference("start", [f.start_ms for f in floors], "ms"),
        reference("RSS, one stream open", [f.rss_stream_mb for f in floors], "MB"),
        reference("RSS, no client", [f.rss_mb for f in floors], "MB"),
        reference("idle CPU", [f.idle_pct for f in floors], "% core"),
        reference("idle, one stream open", [f.idle_stream_pct for f in floors], "% core"),
    ]


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
    floors: dict[str, list[Floor]] = {"python": [], "nvml": []}
    runs: dict[str, list[Run]] = {}
    launches: dict[str, Launch] = {}
    for n in range(args.rounds):  # each round: the floor, then every plugin, side by side
        round_dir = workdir / f"round{n}"
        round_dir.mkdir()
        floors["python"].append(await measure_floor(round_dir, idle))
        if args.real_gpu:
            with_nvml = await measure_floor(round_dir, idle, child_source=FLOOR_NVML_CHILD)
            floors["nvml"].append(with_nvml)
        for vendor, (resource, count, extra) in commands(round_dir, args.real_gpu).items():
            launches[vendor] = our_launch(vendor, resource, count, extra, round_dir)
        if args.peer_nvidia:
            launches["nvidia-go (peer)"] = peer_launch(args.peer_nvidia, real_gpus())
        for label, launch in launches.items():
            runs.setdefault(label, []).append(await run_vendor(launch, idle))
    rows = floor_rows("floor: python + grpc + prometheus_client", floors["python"])
    if args.real_gpu:
        rows += floor_rows("floor + NVML init", floors["nvml"])
    for label, launch in launches.items():
        nvml = args.real_gpu and label.startswith("nvidia")
        rows += vendor_rows(
            label,
            runs[label],
            floors["nvml" if nvml else "python"],
            launch.goals,
            launch.metrics_port is not None,
        )
    return rows
