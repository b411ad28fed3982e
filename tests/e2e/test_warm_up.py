"""Warm-up: what the first hook call would load lazily is loaded once the devices are out.

Start-up stays lean by loading late (issue 17); the first GetPreferredAllocation
then paid for the modules and the GPU link matrix (110-165 ms on a simulated
8-GPU node, later calls 2 ms) and the first Prepare for the file helpers. A
backend that is a Warmer is warmed in a worker thread (never on the event
loop, which serves the kubelet meanwhile) after the kubelet has its devices,
through ``accel-plugins <backend>``'s serve and through the DRA driver; a
PreferenceWarmer's preferences only in device-plugin mode, since DRA has no
preferred allocation (issue 34).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from accel_plugins.backends.nvidia.allocation import pair_score
from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.factory import backend_factory
from accel_plugins.cli.main import serve
from accel_plugins.deviceplugin.manager import ManagerSettings
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.device import Device, DeviceTree, tree
from tests.fixtures.dra_plugin import FakeClaims
from tests.fixtures.framework import ScriptedBackend, TreeRecorder

RESOURCE = "example.com/card"


class WarmedBackend(ScriptedBackend):
    """Records the thread its warm-up ran in, and lets the test await it."""

    def __init__(self, devices: DeviceTree) -> None:
        super().__init__(devices)
        self.loop = asyncio.get_running_loop()
        self.warmed = asyncio.Event()
        self.preferences_warmed = asyncio.Event()
        self.threads: list[threading.Thread] = []
        self.calls: list[str] = []

    def warm(self) -> None:
        self.threads.append(threading.current_thread())
        self.calls.append("warm")
        self.loop.call_soon_threadsafe(self.warmed.set)

    def warm_preferences(self) -> None:
        self.calls.append("warm_preferences")
        self.loop.call_soon_threadsafe(self.preferences_warmed.set)


def cards() -> DeviceTree:
    return tree({RESOURCE: [Device("card0"), Device("card1")]})


async def test_serve_warms_the_backend_in_a_worker_thread_once_the_kubelet_has_the_devices(
    kubelet: Kubelet, kubelet_dir: Path
) -> None:
    backend = WarmedBackend(cards())
    task = asyncio.create_task(serve(lambda: backend, ManagerSettings(plugin_dir=kubelet_dir)))
    try:
        await kubelet.wait_for_resource(RESOURCE, allocatable=2)
        await asyncio.wait_for(backend.warmed.wait(), 10)
        assert len(backend.threads) == 1
        assert backend.threads[0] is not threading.main_thread()
        await asyncio.wait_for(backend.preferences_warmed.wait(), 10)
        assert backend.calls == ["warm", "warm_preferences"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_dra_driver_warms_the_backend_in_a_worker_thread(start_driver: Any) -> None:
    backend = WarmedBackend(cards())
    await start_driver(backend, FakeClaims())
    await asyncio.wait_for(backend.warmed.wait(), 10)
    assert backend.threads[0] is not threading.main_thread()
    assert backend.calls == ["warm"]  # no preferred allocation in DRA: nothing to warm for it


async def test_a_warmed_nvidia_backend_builds_no_link_matrix_on_its_first_preferred_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[int] = []
    real = pair_score.LinkMatrix.from_gpus

    def counting(gpus: Any) -> pair_score.LinkMatrix:
        built.append(len(gpus))
        return real(gpus)

    monkeypatch.setattr(pair_score.LinkMatrix, "from_gpus", staticmethod(counting))
    backend = cast(NvidiaBackend, backend_factory({"simulate": "pcie-8gpu-nvlink-pairs"}, {})())
    trees = TreeRecorder()
    task = asyncio.create_task(backend.run(trees))
    try:
        published = await trees.wait_for(lambda t: "nvidia.com/gpu" in t)
        await asyncio.to_thread(backend.warm)
        assert built == []  # Allocate's modules only: DRA calls this one too
        await asyncio.to_thread(backend.warm_preferences)
        assert built == [8]
        gpus = list(published["nvidia.com/gpu"].values())
        backend.preferred_allocation("nvidia.com/gpu", gpus, [], 2)
        assert built == [8]  # the first call used the matrix warm-up built
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
