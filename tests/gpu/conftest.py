"""The real NVML for the GPU tests; every test here skips cleanly without a driver or a GPU."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from accel_plugins.backends.nvidia.discovery import Node, discover
from accel_plugins.backends.nvidia.errors import NvmlInitError
from accel_plugins.backends.nvidia.nvml import Pynvml


@pytest.fixture(scope="module")
def nvml() -> Iterator[Pynvml]:
    adapter = Pynvml()
    try:
        adapter.init()
    except NvmlInitError as exc:
        pytest.skip(f"no usable NVIDIA driver here: {exc.args[0].splitlines()[0]}")
    try:
        if adapter.device_count() == 0:
            pytest.skip("the driver reports no GPUs")
        yield adapter
    finally:
        adapter.shutdown()


@pytest.fixture(scope="module")
def gpus(nvml: Pynvml) -> Node:
    """What NVML lists here, as the backend's discovery reads it."""
    return discover(nvml)
