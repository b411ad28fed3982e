"""The demo's steps that show what sets these plugins apart, measured as they run.

- Topology: on a simulated PCIe node with NVLink bridges between GPU pairs
  (built-in profile ``pcie-8gpu-nvlink-pairs``), the plugin's
  GetPreferredAllocation answer next to what a plugin without a preference
  gets (the first free devices by ID), each with NVIDIA's pair score
  (``pair_score.py``: 100 per direct NVLink plus the PCIe relation).
- Hotplug: a node appearing in a watched directory reaches the kubelet's
  ListAndWatch through inotify; the time is measured and printed.
- Health: a simulated XID makes a GPU Unhealthy; after a quiet period and a
  passing probe it is Healthy again (``health.py``), both times measured.

Everything runs beside the demo's other plugins, in the same plugin directory
and against the same kubelet emulator, each with its own Manager as a plugin
process has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.eventsource import UdevSource
from accel_plugins.backends.nvidia.allocation.pair_score import link_score
from accel_plugins.backends.nvidia.backend import create_backend
from accel_plugins.backends.nvidia.config.config import NvidiaSettings
from accel_plugins.backends.nvidia.container_contract import generated_mig_minors
from accel_plugins.backends.nvidia.facts import GpuFacts, gpu_facts
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.device import Device
from accel_plugins.util.termstyle import Style

TOPOLOGY_PROFILE = "pcie-8gpu-nvlink-pairs"
GPU = "nvidia.com/gpu"
SERIAL = "accel-plugins.io/serial"
# A DBE-class memory error (NVIDIA's XID catalogue: 48, "Double Bit ECC Error"): critical.
DEMO_XID = 48
# The quiet period before a recovery probe; the plugin's default is 60 s.
DEMO_RECOVERY_SECONDS = 0.2

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Pick:
    """GPUs chosen for one request, and how well they are linked."""

    gpus: tuple[int, ...]
    links: tuple[str, ...]  # the pair tokens, "0-1 NV12+PIX"
    score: int


def pick_of(devices: Sequence[Device]) -> Pick:
    facts = sorted((gpu_facts(d) for d in devices), key=lambda f: f.gpu_index)
    links, score = [], 0
    for a, b in combinations(facts, 2):
        token = _token(a, b.gpu_index)
        links.append(f"{a.gpu_index}-{b.gpu_index} {token}")
        score += link_score(token)
    return Pick(tuple(f.gpu_index for f in facts), tuple(links), score)


def _token(facts: GpuFacts, peer: int) -> str:
    for token, index in zip(facts.links, facts.link_peers, strict=False):
        if index == peer:
            return token
    return "?"


def naive_choice(devices: Sequence[Device], count: int) -> list[Device]:
    """What the kubelet takes from a plugin without a preference: here the first free IDs."""
    return sorted((d for d in devices if d.healthy), key=lambda d: d.id)[:count]


@dataclass
class Highlights:
    """The topology/health node and the hotplug plugin, built in ``workdir``."""

    kubelet: Kubelet
    nvml: SimulatedNvml
    gpus: Manager
    serial: Manager
    hotplug_dir: Path
    tasks: list[asyncio.Task[None]]

    @classmethod
    def set_up(cls, workdir: Path, kubelet: Kubelet) -> Highlights:
        plugin_dir = kubelet.plugin_dir
        node = load_profile(TOPOLOGY_PROFILE)
        nvml = SimulatedNvml(node)
        settings = NvidiaSettings(health_recovery_seconds=DEMO_RECOVERY_SECONDS)
        minors = generated_mig_minors(len(node.gpus))
        gpus = Manager(
            lambda: create_backend(nvml, settings, mig_minors=minors),
            ManagerSettings(plugin_dir=plugin_dir),
        )
        hotplug_dir = workdir / "hotplug"
        hotplug_dir.mkdir()
        # A stand-in outside /dev (allowed explicitly), used as it is; in the
        # container the node is /dev/<its name>.
        config = parse_config(
            "devices:\n  - name: serial\n    groups:\n      - paths:\n"
            f"          - path: {hotplug_dir}/ttyACM*\n"
            "            mountPath: /dev/\n"
            "            allowHostPathOutsideDev: true\n",
            "<demo hotplug config>",
        )
        generic = GenericSettings(udev_source=UdevSource.OFF)
        serial = Manager(
            lambda: GenericBackend(config, generic), ManagerSettings(plugin_dir=plugin_dir)
        )
        return cls(kubelet, nvml, gpus, serial, hotplug_dir, [])

    async def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self.gpus.run(), name="demo topology node"),
            asyncio.create_task(self.serial.run(), name="demo hotplug plugin"),
        ]
        await self.kubelet.wait_for_resource(GPU, allocatable=8, timeout=10)
        await self.kubelet.wait_for_resource(SERIAL, timeout=10)

    async def stop(self) -> None:
        await self.gpus.stop()
        await self.serial.stop()
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- topology ---------------------------------------------------------------

    async def topology(self, say: Say, style: Style) -> None:
        devices = list(self.gpus.tree.get(GPU, {}).values())
        naive = pick_of(naive_choice(devices, 2))
        record = await self.kubelet.allocate("nccl-pair", "main", GPU, 2)
        tree = self.gpus.tree[GPU]
        ours = pick_of([tree[i] for i in record.device_ids])
        say(
            f"  {TOPOLOGY_PROFILE}: 8 GPUs in NVLink-bridged pairs, two PCIe switches per "
            "NUMA node (accel-plugins nvidia --simulate " + TOPOLOGY_PROFILE + ")"
        )
        say("  A pod asks for 2 GPUs (score: NVIDIA's, 100 per NVLink + PCIe relation):")
        say(
            "    "
            + style.good(f"accel-plugins   GPUs {_gpus(ours)}  score {ours.score:>5}")
            + f"  {', '.join(ours.links)}  (GetPreferredAllocation)"
        )
        say(
            "    "
            + style.bad(f"first free IDs  GPUs {_gpus(naive)}  score {naive.score:>5}")
            + f"  {', '.join(naive.links)}  (a plugin without a preference)"
        )

    # -- hotplug ----------------------------------------------------------------

    async def hotplug(self, say: Say, style: Style) -> None:
        node = self.hotplug_dir / "ttyACM0"
        say(
            f"  A USB serial adapter appears: {node} (a symlink to /dev/null "
            "stands in for the device node, whose making needs root)"
        )
        started = time.perf_counter()
        os.symlink("/dev/null", node)
        await self.kubelet.wait_for(
            lambda k: k.resources[SERIAL].allocatable == 1, timeout=10, what="the new device"
        )
        added = (time.perf_counter() - started) * 1000
        say(
            f"    {SERIAL}: 0 -> 1 allocatable, in the kubelet's ListAndWatch after "
            + style.good(f"{added:.1f} ms")
            + " (inotify, no polling)"
        )
        started = time.perf_counter()
        node.unlink()
        await self.kubelet.wait_for(
            lambda k: k.resources[SERIAL].allocatable == 0, timeout=10, what="the unplug"
        )
        removed = (time.perf_counter() - started) * 1000
        say(
            "    unplugged: Unhealthy (kept listed while a pod may hold it) after "
            + style.good(f"{removed:.1f} ms")
        )

    # -- health -----------------------------------------------------------------

    async def health(self, say: Say, style: Style) -> None:
        tree = self.gpus.tree[GPU]
        victim = next(d for d in tree.values() if gpu_facts(d).gpu_index == 7)
        short = victim.id[:12]

        def health_is(value: str) -> Callable[[Kubelet], bool]:
            return lambda k: k.resources[GPU].devices[victim.id].health == value

        # The plugin logs the XID as a warning; here the walkthrough says it instead.
        with _silenced("accel_plugins.backends.nvidia.health"):
            started = time.perf_counter()
            self.nvml.inject_xid(7, DEMO_XID)
            await self.kubelet.wait_for(health_is("Unhealthy"), timeout=10, what="the XID")
            failed = (time.perf_counter() - started) * 1000
        say(
            f"  XID {DEMO_XID} (double-bit ECC error) on GPU 7 ({short}): "
            + style.bad("Unhealthy")
            + f" at the kubelet after {failed:.1f} ms; no new pod gets it"
        )
        started = time.perf_counter()
        await self.kubelet.wait_for(health_is("Healthy"), timeout=10, what="the recovery")
        recovered = time.perf_counter() - started
        say(
            f"  quiet for {DEMO_RECOVERY_SECONDS:g} s and a passing probe: "
            + style.good("Healthy")
            + f" again after {recovered:.2f} s, same ID "
            "(--health-recovery-seconds, 60 by default; NVIDIA's plugin never recovers)"
        )


@contextlib.contextmanager
def _silenced(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


def _gpus(pick: Pick) -> str:
    return ",".join(map(str, pick.gpus))


def next_steps(say: Say, style: Style) -> None:
    """What to run on a real cluster."""
    lines = [
        (
            # No image is published yet: the README's "Install on a cluster" says so.
            "Build the images and push them to your registry (none are published yet):",
            "hack/build-images --registry registry.example.com/accel-plugins --push",
        ),
        (
            "Install the chart (NVIDIA nodes by default; add the generic plugin with devices):",
            "helm install accel-plugins charts/accel-plugins -n kube-system "
            "--set common.imageRegistry=registry.example.com",
        ),
        (
            "Inspect a node's plugin the way its kubelet sees it:",
            "kubectl -n kube-system exec ds/accel-plugins-nvidia -- accel-plugins inspect "
            "/var/lib/kubelet/device-plugins/nvidia.com_gpu.sock --allocate 2",
        ),
        (
            "Try a simulated node locally:",
            "accel-plugins kubelet --plugin-dir /tmp/dp & "
            f"accel-plugins nvidia --simulate {TOPOLOGY_PROFILE} --plugin-dir /tmp/dp",
        ),
    ]
    for text, command in lines:
        say(f"  {text}")
        say(f"    {style.bold(command)}")
