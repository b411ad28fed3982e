"""NVIDIA's mock NVML (``../shared/nvidia-mock``), for running the NVIDIA backend's real
NVML path (pynvml, not ``--simulate``) on a machine without a GPU.

The library comes from NVIDIA/k8s-test-infra's ``pkg/gpu/mocknvml`` (its README says how
it was built); a profile (``configs/mock-nvml-config-<name>.yaml``) says which GPUs it
shows. :func:`mock_nvml_env` unpacks it once per directory and returns the environment a
process needs to load it in place of the driver's ``libnvidia-ml.so.1``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.repo import ROOT

SHARED = ROOT.parent / "shared" / "nvidia-mock"
LIBRARY = "libnvidia-ml.so.550.163.01"


class MockNvmlUnavailable(Exception):  # noqa: N818 (a reason to skip, not a failure)
    """../shared/nvidia-mock is not beside the checkout, or cannot be unpacked."""


def profile_path(profile: str) -> Path:
    path = SHARED / "configs" / f"mock-nvml-config-{profile}.yaml"
    if not path.is_file():
        raise MockNvmlUnavailable(f"no mock NVML profile {profile!r} at {path}")
    return path


def mock_nvml_env(into: Path, profile: str = "h100") -> dict[str, str]:
    """``LD_LIBRARY_PATH`` and ``MOCK_NVML_CONFIG`` for ``profile``'s GPUs, the library
    unpacked under ``into``; MockNvmlUnavailable saying why when it cannot be."""
    unpack = SHARED / "unpack"
    if not unpack.is_file():
        raise MockNvmlUnavailable(f"{SHARED} is not there (NVIDIA's mock NVML)")
    config = profile_path(profile)
    done = subprocess.run(
        [sys.executable, str(unpack), str(into), LIBRARY], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise MockNvmlUnavailable(f"unpacking {LIBRARY} failed: {done.stderr.strip()}")
    link = into / "libnvidia-ml.so.1"
    if not link.exists():
        link.symlink_to(LIBRARY)
    return {"LD_LIBRARY_PATH": str(into), "MOCK_NVML_CONFIG": str(config)}
