"""Fixtures for the NVIDIA backend.

- ``run_nvidia``: runs a backend on the test's loop and records every tree it
  publishes, so tests await tree conditions instead of sleeping.
- ``fake_nvml``: the real pynvml bindings over ``tests/nvml_fake/fake_nvml.c``,
  compiled once per session with gcc (tests skip when gcc is missing).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.config.config import NvidiaSettings, TimeSlicing
from accel_plugins.backends.nvidia.container_contract import AllocateSettings, generated_mig_minors
from accel_plugins.backends.nvidia.nvml import Pynvml
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.backends.nvidia.simulate.simulated_profile import NodeProfile, parse_profile
from accel_plugins.plugin.backend import Backend
from tests.framework_fixtures import TreeRecorder

FAKE_SOURCE = Path(__file__).parent / "nvml_fake" / "fake_nvml.c"


def profile(spec: str | dict[str, Any]) -> NodeProfile:
    """A built-in profile by name, or a profile document written inline."""
    if isinstance(spec, str):
        return load_profile(spec)
    return parse_profile(spec, name="inline", source="test profile")


def settings(
    *,
    mig_strategy: str = "none",
    strategies: Sequence[str] = ("envvar",),
    id_strategy: str = "uuid",
    device_specs: bool = False,
    driver_root: str = "/",
    dev_root: str = "",
    sharing: TimeSlicing | None = None,
    recovery: float = 60.0,
    disable: str = "",
    enable: str = "",
    fail_on_init_error: bool = True,
) -> NvidiaSettings:
    root = Path(driver_root)
    return NvidiaSettings(
        mig_strategy=mig_strategy,
        fail_on_init_error=fail_on_init_error,
        driver_root=root,
        dev_root=Path(dev_root) if dev_root else root,
        allocate=AllocateSettings(
            device_list_strategies=tuple(strategies),
            device_id_strategy=id_strategy,
            pass_device_specs=device_specs,
            dev_root=Path(dev_root) if dev_root else root,
        ),
        time_slicing=sharing or TimeSlicing(),
        disable_healthchecks=disable,
        enable_healthchecks=enable,
        health_recovery_seconds=recovery,
    )


def simulated_backend(
    spec: str | dict[str, Any] = "pcie-4gpu", **options: Any
) -> tuple[NvidiaBackend, SimulatedNvml]:
    nvml = SimulatedNvml(profile(spec))
    backend = NvidiaBackend(
        nvml,
        settings(**options),
        mig_minors=generated_mig_minors(len(nvml.profile.gpus)),
        wait_ms=50,
    )
    return backend, nvml


async def watching(backend: NvidiaBackend, timeout: float = 5.0) -> None:
    """Return once the backend's health thread has registered every GPU for events."""
    assert backend.monitor is not None, "the backend has not published its first tree"
    async with asyncio.timeout(timeout):
        await backend.monitor.ready.wait()


RunNvidia = Callable[[Backend], Awaitable[TreeRecorder]]


@pytest.fixture
async def run_nvidia() -> AsyncIterator[RunNvidia]:
    """Factory: run ``backend`` until the test ends; returns once the first tree is out."""
    tasks: list[asyncio.Task[None]] = []

    async def start(backend: Backend) -> TreeRecorder:
        recorder = TreeRecorder()
        task = asyncio.create_task(backend.run(recorder))
        tasks.append(task)
        waiter = asyncio.ensure_future(recorder.wait_for(lambda _: True))
        done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()  # surface the crash
        await waiter
        return recorder

    yield start
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``libnvidia-ml.so.1`` built from the fake's C source, once per test session."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed; the fake libnvidia-ml.so.1 cannot be built")
    out = tmp_path_factory.mktemp("fake-nvml") / "libnvidia-ml.so.1"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(out), str(FAKE_SOURCE)],
        check=True,
        capture_output=True,
    )
    return out


class FakeNvml:
    """The table the fake library answers from, and adapters that load it."""

    def __init__(self, library: Path, table: Path) -> None:
        self.library = library
        self.table = table
        self.lines: list[str] = []

    def write(self, *lines: str) -> None:
        self.lines.extend(lines)
        self.table.write_text("\n".join(self.lines) + "\n")

    def adapter(self, **options: Any) -> Pynvml:
        return Pynvml(library=str(self.library), **options)

    def count(self, name: str) -> int:
        fn = getattr(ctypes.CDLL(str(self.library)), name)
        fn.restype = ctypes.c_int
        return int(fn())


@pytest.fixture
def fake_nvml(
    fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeNvml]:
    pynvml = pytest.importorskip("pynvml")
    table = tmp_path / "nvml-table.txt"
    table.write_text("")
    monkeypatch.setenv("FAKE_NVML_TABLE", str(table))
    fake = FakeNvml(fake_nvml_library, table)
    yield fake
    # Leave pynvml as we found it: no library loaded, no cached entry points.
    with pynvml.libLoadLock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
