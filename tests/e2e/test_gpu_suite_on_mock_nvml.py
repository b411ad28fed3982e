"""tests/gpu, written for a real GPU, run once on NVIDIA's mock NVML (issue 35).

Our NVML adapter (``backends/nvidia/nvml.py``) is otherwise checked against a GPU only on a
GPU machine, and against our own simulation everywhere else. NVIDIA's mock NVML
(k8s-test-infra ``pkg/gpu/mocknvml``, from ``../shared/nvidia-mock``) is the library
NVIDIA's CI runs its own drivers on: the GPU suite runs here unchanged on its h100
profile, the plugins it starts finding the driver in a mock driver root laid out as
NVIDIA's CI lays one out (``NVIDIA_DRIVER_ROOT``, the driver-root flag's environment twin).
What needs more than NVML (the MPS control daemon, a CUDA client) skips, saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.nvidia_mock import MockNvmlUnavailable, mock_driver_root
from tests.support.repo import ROOT

pytestmark = pytest.mark.timeout(300)


def test_the_gpu_suite_passes_on_nvidias_mock_nvml(tmp_path: Path) -> None:
    try:
        env = mock_driver_root(tmp_path / "root", "h100")
    except MockNvmlUnavailable as exc:
        pytest.skip(str(exc))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/gpu"],
        cwd=ROOT,
        env={**os.environ, **env, "NVIDIA_DRIVER_ROOT": str(tmp_path / "root")},
        capture_output=True,
        text=True,
        timeout=280,
    )
    report = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary, report
    assert "failed" not in summary, report
    # The NVML adapter's own tests ran on the mock, not skipped for want of a driver.
    assert "no usable NVIDIA driver" not in done.stdout, report
