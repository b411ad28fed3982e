"""`accel-plugins demo`: a real plugin and an emulated kubelet, on any Linux machine.

Everything runs in this process over real unix sockets in a temp dir: the
kubelet emulator, the framework's manager and gRPC servers, and the generic
backend on a built-in config of nodes every Linux machine has (/dev/null,
/dev/zero, /dev/full, /dev/random, /dev/urandom). The config names them by
their host paths; ``dev_root`` says where this process sees the host's /dev
(the real one by default), exactly as ``--dev-root`` does for the plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import signal
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.monitor import UdevSource
from accel_plugins.backends.nvidia.config.config import (
    NvidiaSettings,
    ReplicaDevices,
    ReplicatedResource,
    TimeSlicing,
)
from accel_plugins.backends.nvidia.factory import simulated_backend
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.mps.mps_control import fake_program
from accel_plugins.backends.nvidia.mps.mps_daemon import Daemons
from accel_plugins.backends.nvidia.mps.mps_startup import daemons_for
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.demo.highlights import Highlights, next_steps
from accel_plugins.deviceplugin.instrumented import instrumented_manager
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.kubelet_emulator import AllocationRecord, Kubelet
from accel_plugins.metrics import MetricsServer
from accel_plugins.runtime.podresources import PodResourcesCache
from accel_plugins.util.termstyle import PLAIN, Style

DEMO_CONFIG = """\
devices:
  # /dev/null, shareable: 4 pods may hold it at once.
  - name: dev-null
    groups:
      - count: 4
        paths:
          - path: /dev/null
            permissions: rw
  # A glob: /dev/random and /dev/urandom are one device each, read-only.
  - name: random
    groups:
      - paths:
          - path: /dev/*random
            permissions: r
  # Two paths zipped into one device: /dev/zero with /dev/full, twice.
  - name: zero-full
    groups:
      - count: 2
        paths:
          - path: /dev/zero
          - path: /dev/full
            mountPath: /dev/disk-full
"""

# (resource, how many) for the demo pod's one container.
DEMO_REQUEST = (("accel-plugins.io/dev-null", 2), ("accel-plugins.io/zero-full", 1))

# The simulated NVIDIA node: 8 H100s on NVSwitch, each shared four ways: GPUs 0-3 time-sliced,
# GPUs 4-7 with MPS (its control daemons run the fake control program).
NVIDIA_PROFILE = "dgx-h100"
NVIDIA_REPLICAS = 4
NVIDIA_RESOURCE = "nvidia.com/gpu.shared"
NVIDIA_MPS_RESOURCE = "nvidia.com/gpu.mps"


def _demo_sharing(mps_root: Path) -> NvidiaSettings:
    def half(refs: tuple[str, ...], rename: str, where: str) -> TimeSlicing:
        entry = ReplicatedResource(
            "nvidia.com/gpu", rename, ReplicaDevices(refs=refs), NVIDIA_REPLICAS, where
        )
        return TimeSlicing(
            fail_requests_greater_than_one=rename == NVIDIA_MPS_RESOURCE, resources=(entry,)
        )

    return NvidiaSettings(
        time_slicing=half(("0", "1", "2", "3"), NVIDIA_RESOURCE, "demo timeSlicing"),
        mps=half(("4", "5", "6", "7"), NVIDIA_MPS_RESOURCE, "demo mps"),
        mps_root=str(mps_root),
    )


class _Printer:
    def __init__(self, out: TextIO, style: Style = PLAIN) -> None:
        self.out = out
        self.style = style
        self.events = False  # echo the kubelet's events (while serving, after the walkthrough)

    def __call__(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def section(self, title: str) -> None:
        self()
        self(self.style.title(f"== {title} " + "=" * max(0, 66 - len(title))))

    def kubelet_event(self, line: str) -> None:
        if self.events:
            self(f"  kubelet: {line}")


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """Keep info logs from interleaving with the walkthrough (debug stays if asked)."""
    logger = logging.getLogger("accel_plugins")
    old = logger.level
    if logger.getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(old)


def _short(device_id: str) -> str:
    """The first 12 characters, keeping a replica suffix (`GPU-0489...::2`)."""
    base, sep, replica = device_id.partition("::")
    return base[:12] + sep + replica


# The series the walkthrough prints: the rest of a scrape is there, just long.
_SHOWN = (
    "accel_plugins_devices{",
    "accel_plugins_allocations_total{",
    "accel_plugins_pod_attribution_available ",
)
_SHOWN_HELD = ("accel_plugins_device_healthy{", "accel_plugins_gpu_")


async def _scrape(host: str, port: int) -> list[str]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: demo\r\n\r\n")
    await writer.drain()
    body = (await reader.read()).decode()
    writer.close()
    await writer.wait_closed()
    return [
        line
        for line in body.splitlines()
        if line.startswith(_SHOWN)
        or (line.startswith(_SHOWN_HELD) and 'pod="' in line and 'pod=""' not in line)
    ]


def _cdi_devices(directory: Path) -> dict[str, dict[str, Any]]:
    """Qualified CDI name -> its containerEdits, from the spec files in ``directory``."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        spec = json.loads(path.read_text())
        for device in spec.get("devices", []):
            found[f"{spec['kind']}={device['name']}"] = device.get("containerEdits", {})
    return found


def _print_allocation(
    say: _Printer, record: AllocationRecord, cdi_specs: Mapping[str, Mapping[str, Any]]
) -> None:
    ids = ", ".join(map(_short, record.device_ids))
    say(f"  {record.resource} x{len(record.device_ids)}: {ids}")
    response = record.response
    for spec in response.devices:
        say(f"    device  {spec.host_path} -> {spec.container_path} ({spec.permissions})")
    for mount in response.mounts:
        ro = "ro" if mount.read_only else "rw"
        say(f"    mount   {mount.host_path} -> {mount.container_path} ({ro})")
    for name, value in sorted(response.envs.items()):
        say(f"    env     {name}={value}")
    for cdi in response.cdi_devices:
        # A CDI device is injected by the runtime from its spec, not by the response.
        say(f"    cdi     {cdi}  (the runtime applies its spec:)")
        for node in cdi_specs.get(cdi, {}).get("deviceNodes", []):
            host = node.get("hostPath", node["path"])
            say(f"      device  {host} -> {node['path']} ({node.get('permissions', 'rwm')})")


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
    say = _Printer(out, Style(color))
    demo = _Demo.set_up(say, dev_root)
    highlights = Highlights.set_up(demo.workdir, demo.kubelet)
    demo.introduce()
    with _quiet_logs():
        try:
            await demo.start_kubelet()
            await demo.start_plugins()
            await highlights.start()
            demo.show_registrations()
            demo.show_devices()
            await demo.allocate_demo_pod()
            demo.show_gpus()
            await demo.allocate_gpus()
            say.section("Topology-aware allocation")
            await highlights.topology(say, say.style)
            say.section("Hotplug")
            await highlights.hotplug(say, say.style)
            say.section("GPU health: an XID, then recovery")
            await highlights.health(say, say.style)
            await demo.show_metrics(metrics_host)
            say.section("Next steps")
            next_steps(say, say.style)
            await demo.finish(once)
            return 0
        finally:
            await highlights.stop()
            await demo.tear_down()


@dataclass
class _Demo:
    """What the walkthrough's steps share: the printer, the temp dir and what runs in it."""

    say: _Printer
    workdir: Path
    generic_settings: GenericSettings
    generic_resources: list[str]
    """The generic plugin's resource names, in config order."""
    generic: Manager
    nvidia: Manager
    pods: PodResourcesCache
    metrics: dict[str, MetricsServer]
    """Each plugin's metrics server, by plugin name."""
    kubelet: Kubelet
    mps: Daemons
    generic_task: asyncio.Task[None] | None = None
    nvidia_task: asyncio.Task[None] | None = None
    mps_task: asyncio.Task[None] | None = None
    mps_stop: asyncio.Event | None = None

    @classmethod
    def set_up(cls, say: _Printer, dev_root: Path) -> _Demo:
        """Build both plugins and the kubelet emulator in a new temp dir; nothing runs yet."""
        config = parse_config(DEMO_CONFIG, "<built-in demo config>")
        # Directly under /tmp: unix socket paths must stay under 108 bytes.
        workdir = Path(tempfile.mkdtemp(prefix="accel-demo-", dir="/tmp"))
        plugin_dir = workdir / "device-plugins"
        settings = GenericSettings(
            dev_root=dev_root,
            cdi_spec_dir=workdir / "cdi",
            udev_source=UdevSource.OFF,  # path globs only; inotify covers them
        )
        # Each plugin with the metrics wiring of its own process, as `accel-plugins <vendor>` has.
        pods = PodResourcesCache(workdir / "pod-resources.sock", max_age=0.0)
        manager, generic_metrics = instrumented_manager(
            lambda: GenericBackend(config, settings), ManagerSettings(plugin_dir=plugin_dir), pods
        )
        nvidia_settings = _demo_sharing(workdir / "mps")
        mps = daemons_for(
            SimulatedNvml(load_profile(NVIDIA_PROFILE)), nvidia_settings, fake_program()
        )
        nvidia, nvidia_metrics = instrumented_manager(
            lambda: simulated_backend(NVIDIA_PROFILE, nvidia_settings),
            ManagerSettings(plugin_dir=plugin_dir),
            pods,
        )
        kubelet = Kubelet(
            plugin_dir,
            pod_resources_socket=workdir / "pod-resources.sock",
            on_event=say.kubelet_event,
        )
        return cls(
            say=say,
            workdir=workdir,
            generic_settings=settings,
            generic_resources=[f"{settings.domain}/{spec.name}" for spec in config.devices],
            generic=manager,
            nvidia=nvidia,
            pods=pods,
            metrics={"generic": generic_metrics, "nvidia": nvidia_metrics},
            kubelet=kubelet,
            mps=mps,
        )

    def introduce(self) -> None:
        """Say what runs where, and print the built-in config."""
        say, kubelet = self.say, self.kubelet
        say(
            "accel-plugins demo: the generic /dev plugin, a simulated NVIDIA node and an "
            "emulated kubelet, in one process"
        )
        say(f"  working directory   {self.workdir}")
        say(f"  kubelet socket      {kubelet.socket_path}")
        say(f"  pod resources API   {kubelet.pod_resources_socket}")
        say(
            "  built-in config (host paths; this process sees the host's /dev at "
            f"{self.generic_settings.dev_root}):"
        )
        for line in DEMO_CONFIG.splitlines():
            say(f"    {line}")

    async def start_kubelet(self) -> None:
        """Start the kubelet emulator: its registration socket and PodResources API."""
        await self.kubelet.start()

    async def start_plugins(self) -> None:
        """Run both plugins; wait until the kubelet has every resource's device list."""
        self.mps_stop = asyncio.Event()
        self.mps_task = asyncio.create_task(self.mps.run(self.mps_stop), name="demo mps")
        self.generic_task = asyncio.create_task(self.generic.run(), name="demo manager")
        self.nvidia_task = asyncio.create_task(self.nvidia.run(), name="demo nvidia manager")
        for name in [*self.generic_resources, NVIDIA_RESOURCE, NVIDIA_MPS_RESOURCE]:
            await self.kubelet.wait_for_resource(name, timeout=10)
        # MPS replicas are listed at once, Healthy once their control daemon is up.
        mps = NVIDIA_MPS_RESOURCE
        await self.kubelet.wait_for(lambda k: k.resources[mps].allocatable == 16, timeout=20)

    def show_registrations(self) -> None:
        """One line per plugin registration the kubelet accepted, with its options."""
        self.say.section("Registration")
        for reg in self.kubelet.registrations:
            opts = reg.options
            self.say(
                f"  {reg.resource_name:<28} endpoint {reg.endpoint}  "
                f"(API {reg.version}, preferred allocation "
                f"{'yes' if opts.get_preferred_allocation_available else 'no'}, "
                f"pre-start {'yes' if opts.pre_start_required else 'no'})"
            )

    def show_devices(self) -> None:
        """The generic plugin's devices as the kubelet sees them: health, NUMA, host paths."""
        say = self.say
        say.section("Devices (as the kubelet sees them)")
        for name in self.generic_resources:
            view = self.kubelet.resources[name]
            say(f"  {name}: {view.allocatable} allocatable of {view.capacity}")
            tree = self.generic.tree.get(name, {})
            for device_id, state in sorted(view.devices.items()):
                device = tree.get(device_id)
                paths = ", ".join(n.host_path for n in device.nodes) if device else "?"
                numa = ",".join(map(str, state.numa_nodes)) or "-"
                say(f"    {_short(device_id)}  {state.health:<9}  numa {numa:<3}  {paths}")

    async def allocate_demo_pod(self) -> None:
        """Allocate ``DEMO_REQUEST`` for one container; show the responses and CDI specs."""
        say = self.say
        say.section("Allocation for pod default/demo-pod, container app")
        for name, count in DEMO_REQUEST:
            record = await self.kubelet.allocate("demo-pod", "app", name, count)
            _print_allocation(say, record, _cdi_devices(self.workdir / "cdi"))
        say(f"  CDI specs written to {self.generic_settings.cdi_spec_dir}:")
        for spec_file in sorted(p.name for p in (self.workdir / "cdi").glob("*.json")):
            say(f"    {spec_file}")

    def show_gpus(self) -> None:
        """The simulated NVIDIA node: each GPU and its replicas, time-sliced or MPS-shared."""
        say = self.say
        say.section(
            f"Simulated NVIDIA node: {NVIDIA_PROFILE}, each GPU shared x{NVIDIA_REPLICAS} "
            f"(accel-plugins nvidia --simulate {NVIDIA_PROFILE})"
        )
        for resource, how in (
            (NVIDIA_RESOURCE, "time-sliced: replicas take turns on the whole GPU"),
            (NVIDIA_MPS_RESOURCE, "MPS: concurrent clients, each with a share of SMs and memory"),
        ):
            view = self.kubelet.resources[resource]
            say(f"  {resource}: {view.allocatable} allocatable of {view.capacity} ({how})")
            per_gpu: dict[tuple[int, str, str], int] = {}
            for device in self.nvidia.tree.get(resource, {}).values():
                facts = gpu_facts(device)
                key = (facts.gpu_index, facts.name, facts.replica_of or device.id)
                per_gpu[key] = per_gpu.get(key, 0) + 1
            for (index, model, uuid), count in sorted(per_gpu.items()):
                say(
                    f"    GPU {index}  {model}  {_short(uuid)}  {count} replicas "
                    f"({_short(uuid)}::0 .. ::{count - 1})"
                )
        for supervisor in self.mps.supervisors:
            say(
                f"  MPS control daemon for {supervisor.resource} "
                "(accel-plugins mps-control-daemon, a fake nvidia-cuda-mps-control here):"
            )
            for command in supervisor.plan.commands():
                say(f"    {command}")

    async def allocate_gpus(self) -> None:
        """Allocate two time-sliced GPUs and one MPS replica; show the responses."""
        self.say("  Allocation for pod default/train, container main (2 time-sliced GPUs):")
        record = await self.kubelet.allocate("train", "main", NVIDIA_RESOURCE, 2)
        _print_allocation(self.say, record, _cdi_devices(self.workdir / "cdi"))
        # failRequestsGreaterThanOne, on by default for MPS: one replica per container.
        self.say("  Allocation for pod default/infer, container main (1 MPS replica):")
        record = await self.kubelet.allocate("infer", "main", NVIDIA_MPS_RESOURCE, 1)
        _print_allocation(self.say, record, _cdi_devices(self.workdir / "cdi"))

    async def show_metrics(self, host: str) -> None:
        """Start each plugin's metrics server on ``host`` and print a selection of a scrape."""
        self.say.section("Metrics")
        await self.pods.refresh()  # the pods above, named on the device and GPU series
        for plugin, endpoint in self.metrics.items():
            bound, port = await endpoint.start(host, 0)
            self.say(
                f"  {plugin} plugin: Prometheus metrics at "
                f"http://{bound}:{port}/metrics (health: /healthz); a selection:"
            )
            for line in await _scrape(bound, port):
                self.say(f"    {line}")

    async def finish(self, once: bool) -> None:
        """With ``once``, say goodbye; else keep serving, echoing kubelet events, until a signal."""
        say = self.say
        if once:
            say()
            say("done (--once); cleaning up")
            return
        assert self.generic_task is not None  # start_plugins ran
        say.section("Serving")
        say("  The plugin stays up; try, from another terminal:")
        endpoint = self.kubelet.plugin_dir / self.kubelet.registrations[0].endpoint
        say(f"    accel-plugins inspect {endpoint}")
        say("  kubelet events follow; Ctrl-C stops.")
        say.events = True
        await _until_signal(self.generic_task)
        say("stopping")

    async def tear_down(self) -> None:
        """Stop metrics servers, plugins and the kubelet; remove the temp dir."""
        self.say.events = False
        for endpoint in self.metrics.values():
            await endpoint.stop()
        await self.generic.stop()
        await self.nvidia.stop()
        if self.mps_stop is not None and self.mps_task is not None:
            self.mps_stop.set()  # each control daemon is told to quit
            await self.mps_task
        for task in (self.generic_task, self.nvidia_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.kubelet.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


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


def demo_config_text() -> str:
    """The built-in config, for documentation."""
    return textwrap.dedent(DEMO_CONFIG)
