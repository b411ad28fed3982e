"""NVIDIA's mock NVML (``../shared/nvidia-mock``), for running the NVIDIA backend's real
NVML path (pynvml, not ``--simulate``) on a machine without a GPU.

The library comes from NVIDIA/k8s-test-infra's ``pkg/gpu/mocknvml`` (its README says how
it was built); a profile (``configs/mock-nvml-config-<name>.yaml``) says which GPUs it
shows. :func:`mock_nvml_env` unpacks it once per directory and returns the environment a
process needs to load it in place of the driver's ``libnvidia-ml.so.1``.
"""

from __future__ import annotations

import os
import stat
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


PLUGIN = "gpu-kubelet-plugin"
PROFILES = ("a100", "b200", "gb200", "gb300", "h100", "l40s", "t4")
"""NVIDIA's mock profiles; none has MIG enabled (each says ``mode_current: "disabled"``)."""


def nvidia_dra_plugin(into: Path) -> Path:
    """NVIDIA's DRA kubelet plugin (dra-driver-nvidia-gpu 95932046), unpacked under ``into``."""
    unpack = SHARED / "unpack"
    if not unpack.is_file():
        raise MockNvmlUnavailable(f"{SHARED} is not there (NVIDIA's DRA kubelet plugin)")
    done = subprocess.run(
        [sys.executable, str(unpack), str(into), PLUGIN], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise MockNvmlUnavailable(f"unpacking {PLUGIN} failed: {done.stderr.strip()}")
    return into / PLUGIN


def mock_driver_root(root: Path, profile: str) -> dict[str, str]:
    """A driver root as NVIDIA's mock CI lays one out (dra-driver-nvidia-gpu
    ``hack/ci/mock-nvml/setup-mock-gpu.sh``): the mock library under the profile's driver
    version in ``usr/lib64`` with its ``.so.1`` and ``.so`` links, the profile as
    ``config/config.yaml``, a stand-in ``usr/bin/nvidia-smi``, and the device nodes NVML's
    GPUs would have (``nvidia<minor>``, ``nvidiactl``, ``nvidia-uvm``, ``-uvm-tools``; mknod,
    so root only: MockNvmlUnavailable otherwise). The environment that loads it."""
    import yaml

    config = yaml.safe_load(profile_path(profile).read_text())
    version = str(config["system"]["driver_version"])
    lib64 = root / "usr" / "lib64"
    for directory in (lib64, root / "usr" / "bin", root / "config", root / "dev"):
        directory.mkdir(parents=True, exist_ok=True)
    unpacked = root / "unpacked"
    mock_nvml_env(unpacked, profile)
    real = lib64 / f"libnvidia-ml.so.{version}"  # NVIDIA's CDI generator looks it up so
    real.write_bytes((unpacked / LIBRARY).read_bytes())
    (lib64 / "libnvidia-ml.so.1").symlink_to(real.name)
    (lib64 / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    (root / "config" / "config.yaml").write_text(profile_path(profile).read_text())
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")  # located for the CDI mounts, never run here
    smi.chmod(0o755)
    minors = [int(d.get("minor_number", i)) for i, d in enumerate(config.get("devices") or [])]
    nodes = {f"nvidia{m}": (195, m) for m in minors}
    nodes |= {"nvidiactl": (195, 255), "nvidia-uvm": (510, 0), "nvidia-uvm-tools": (510, 1)}
    for name, (major, minor) in nodes.items():
        try:
            os.mknod(root / "dev" / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        except PermissionError as exc:
            raise MockNvmlUnavailable(f"device nodes need CAP_MKNOD: {exc}") from None
        os.chmod(root / "dev" / name, 0o666)
    return {"LD_LIBRARY_PATH": str(lib64), "MOCK_NVML_CONFIG": str(root / "config/config.yaml")}
