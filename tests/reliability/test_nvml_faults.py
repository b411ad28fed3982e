"""NVML faults on a simulated node, seen from the kubelet: GPU lost, event waits failing,
an XID storm. Affected devices turn Unhealthy, the plugin stays up and keeps serving the
others, devices recover as health.py documents, and a storm leaves no memory behind.

The NVIDIA backend runs behind the real manager and gRPC servers; only NVML is
simulated (``SimulatedNvml``, plus a wrapper that breaks event waits on demand).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import tracemalloc

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.container_contract import generated_mig_minors
from accel_plugins.backends.nvidia.errors import NvmlError
from accel_plugins.backends.nvidia.nvml import EventSet, Handle, XidEvent
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.deviceplugin.manager import Manager
from accel_plugins.kubelet_emulator import Kubelet
from tests.fixtures.framework import StartManager
from tests.fixtures.nvidia import settings, watching

GPU = "nvidia.com/gpu"
GPUS = 4


class BreakableNvml(SimulatedNvml):
    """A simulated node whose event waits fail while ``broken`` is set (a driver in trouble)."""

    def __init__(self) -> None:
        super().__init__(load_profile("pcie-4gpu"))
        self.broken = threading.Event()
        self.failures: list[float] = []  # monotonic times of failed waits
        self._loop = asyncio.get_running_loop()
        self._failed = asyncio.Event()

    def create_event_set(self) -> EventSet:
        return _BreakableEvents(super().create_event_set(), self)

    def failed(self) -> None:
        """Called on the health thread."""
        self.failures.append(time.monotonic())
        self._loop.call_soon_threadsafe(self._failed.set)

    async def wait_for_failures(self, count: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.failures) < count:
                self._failed.clear()
                await self._failed.wait()


class _BreakableEvents:
    def __init__(self, inner: EventSet, owner: BreakableNvml) -> None:
        self._inner = inner
        self._owner = owner

    def register(self, handle: Handle) -> None:
        self._inner.register(handle)

    def wait(self, timeout_ms: int) -> XidEvent | None:
        if self._owner.broken.is_set():
            self._owner.failed()
            raise NvmlError("nvmlEventSetWait", 999, "Unknown Error")
        return self._inner.wait(timeout_ms)

    def interrupt(self) -> bool:
        return self._inner.interrupt()

    def free(self) -> None:
        self._inner.free()


def backend(nvml: SimulatedNvml, recovery: float) -> NvidiaBackend:
    return NvidiaBackend(
        nvml, settings(recovery=recovery), mig_minors=generated_mig_minors(GPUS), wait_ms=20
    )


async def serve(
    kubelet: Kubelet, start_manager: StartManager, nvml: SimulatedNvml, recovery: float
) -> tuple[Manager, list[str]]:
    """Serve the node; return the manager and the GPUs' device IDs in index order."""
    node = backend(nvml, recovery)
    running = await start_manager(node)
    await kubelet.wait_for_resource(GPU, allocatable=GPUS)
    await watching(node)
    ids = [gpu.uuid for gpu in nvml.profile.gpus]
    assert sorted(ids) == kubelet.resources[GPU].healthy
    return running.manager, ids


async def assert_plugin_alive(kubelet: Kubelet, manager: Manager) -> None:
    status = manager.status()[GPU]
    assert status.serving
    assert status.registered
    assert kubelet.resources[GPU].connected


async def test_a_lost_gpu_is_unhealthy_until_it_answers_again(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    nvml = SimulatedNvml(load_profile("pcie-4gpu"))
    manager, ids = await serve(kubelet, start_manager, nvml, recovery=0.1)

    nvml.lose_gpu(2)
    await kubelet.wait_for(lambda k: k.resources[GPU].unhealthy == [ids[2]])
    await assert_plugin_alive(kubelet, manager)
    # The others are still handed out; the lost one is not.
    record = await kubelet.allocate("pod", "main", GPU, GPUS - 1)
    assert ids[2] not in record.device_ids

    # Probes keep failing while it is gone, then pass once it answers again.
    nvml.restore_gpu(2)
    await kubelet.wait_for(lambda k: k.resources[GPU].allocatable == GPUS, timeout=10)
    await assert_plugin_alive(kubelet, manager)


async def test_failing_event_waits_mark_every_gpu_until_they_work_again(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    nvml = BreakableNvml()
    manager, ids = await serve(kubelet, start_manager, nvml, recovery=0.1)

    # Nobody can see XIDs now, so no GPU may be promised healthy (NVIDIA's plugin agrees).
    nvml.broken.set()
    await kubelet.wait_for(lambda k: k.resources[GPU].unhealthy == sorted(ids))
    await assert_plugin_alive(kubelet, manager)

    # A persistent failure is retried about once a second, not in a hot loop.
    await nvml.wait_for_failures(3)
    first, second, third = nvml.failures[:3]
    assert second - first >= 0.9
    assert third - second >= 0.9

    nvml.broken.clear()
    await kubelet.wait_for(lambda k: k.resources[GPU].allocatable == GPUS, timeout=10)
    await assert_plugin_alive(kubelet, manager)


async def storm(nvml: SimulatedNvml, kubelet: Kubelet, events: int) -> None:
    """``events`` XIDs: most on GPU 1 (critical), the rest ignored application XIDs on GPU 3."""
    for i in range(events):
        if i % 4 == 3:
            nvml.inject_xid(3, 13)
        else:
            nvml.inject_xid(1, 79 if i % 2 else 48)
    nvml.inject_xid(0, 31)  # ignored, and comes last: once handled, the storm is over
    ids = [gpu.uuid for gpu in nvml.profile.gpus]
    await kubelet.wait_for(lambda k: k.resources[GPU].unhealthy == [ids[1]])


async def test_an_xid_storm_marks_only_its_gpu_and_leaves_no_memory_behind(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    nvml = SimulatedNvml(load_profile("pcie-4gpu"))
    manager, _ = await serve(kubelet, start_manager, nvml, recovery=0.2)

    updates = kubelet.resources[GPU].updates
    await storm(nvml, kubelet, 1_000)
    await assert_plugin_alive(kubelet, manager)
    # One health change is one update, however many events caused it.
    assert kubelet.resources[GPU].updates - updates <= 3
    await kubelet.wait_for(lambda k: k.resources[GPU].allocatable == GPUS, timeout=10)

    # A second storm, measured: what the first one warmed up is not counted.
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        await storm(nvml, kubelet, 1_000)
        await kubelet.wait_for(lambda k: k.resources[GPU].allocatable == GPUS, timeout=10)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # About 12 KB here; keeping anything per event (an XidEvent is ~100 bytes) would show.
    assert grown < 64 * 1024, f"{grown} bytes still held after the storm"
    await assert_plugin_alive(kubelet, manager)
