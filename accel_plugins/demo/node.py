"""The demo's node: what it runs, built in a temp dir, started and torn down.

A generic /dev plugin on a built-in config of device nodes every Linux machine has, a
simulated NVIDIA node (``dgx-h100``) whose GPUs are half time-sliced and half MPS-shared
(with MPS control daemons running the fake control program), each plugin with its own
metrics server as its process would have, and the kubelet emulator they register with.
The config names device nodes by their host paths; ``dev_root`` says where this process
sees the host's /dev, exactly as ``--dev-root`` does for the plugin. Nothing here prints:
the walkthrough decides what to show.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
from accel_plugins.backends.nvidia.mps.mps_control import fake_program
from accel_plugins.backends.nvidia.mps.mps_daemon import Daemons
from accel_plugins.backends.nvidia.mps.mps_startup import daemons_for
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.deviceplugin.instrumented import instrumented_manager
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.metrics import MetricsServer
from accel_plugins.runtime.podresources import PodResourcesCache

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

# The simulated NVIDIA node: 8 H100s on NVSwitch, each shared four ways: GPUs 0-3 time-sliced,
# GPUs 4-7 with MPS (its control daemons run the fake control program).
NVIDIA_PROFILE = "dgx-h100"
NVIDIA_REPLICAS = 4
NVIDIA_RESOURCE = "nvidia.com/gpu.shared"
NVIDIA_MPS_RESOURCE = "nvidia.com/gpu.mps"


def demo_config_text() -> str:
    """The built-in config, for documentation."""
    return textwrap.dedent(DEMO_CONFIG)


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


@dataclass
class DemoNode:
    """The temp dir and everything that runs in it; the walkthrough's steps read from it."""

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

    @property
    def cdi_dir(self) -> Path:
        """Where the generic plugin writes its CDI specs (the runtime's spec dir on a node)."""
        return self.workdir / "cdi"

    @classmethod
    def set_up(cls, dev_root: Path, on_event: Callable[[str], None]) -> DemoNode:
        """Build both plugins and the kubelet emulator in a new temp dir; nothing runs yet.

        ``on_event`` gets each of the kubelet's events, one line each.
        """
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
            plugin_dir, pod_resources_socket=workdir / "pod-resources.sock", on_event=on_event
        )
        return cls(
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

    async def start(self) -> None:
        """Start the kubelet, then both plugins; wait until it has every resource's devices."""
        await self.kubelet.start()
        self.mps_stop = asyncio.Event()
        self.mps_task = asyncio.create_task(self.mps.run(self.mps_stop), name="demo mps")
        self.generic_task = asyncio.create_task(self.generic.run(), name="demo manager")
        self.nvidia_task = asyncio.create_task(self.nvidia.run(), name="demo nvidia manager")
        for name in [*self.generic_resources, NVIDIA_RESOURCE, NVIDIA_MPS_RESOURCE]:
            await self.kubelet.wait_for_resource(name, timeout=10)
        # MPS replicas are listed at once, Healthy once their control daemon is up.
        mps = NVIDIA_MPS_RESOURCE
        await self.kubelet.wait_for(lambda k: k.resources[mps].allocatable == 16, timeout=20)

    async def tear_down(self) -> None:
        """Stop metrics servers, plugins and the kubelet; remove the temp dir."""
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
