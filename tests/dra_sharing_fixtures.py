"""A simulated node that shares GPUs both ways, for the DRA sharing tests.

pcie-4gpu with one config file as the device plugin reads it: GPU 0 time-sliced
into 2 replicas (``nvidia.com/gpu.shared``), GPU 1 shared by MPS into 2
replicas (``nvidia.com/gpu.mps``, its control daemon up: its ``.started`` mark there
and its lock held, as ``accel-plugins mps-control-daemon`` holds it), GPUs 2 and 3
whole. ``gpu_config`` writes a claim's opaque parameters in the shape
NVIDIA's DRA driver takes (NVIDIA/k8s-dra-driver-gpu
``api/nvidia.com/resource/v1beta1/api.go``: group ``resource.nvidia.com``,
version ``v1beta1``, kind ``GpuConfig``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.config.config import Overrides, load_config_file, resolve
from accel_plugins.backends.nvidia.container_contract import generated_mig_minors
from accel_plugins.backends.nvidia.mps.mps_lock import DaemonLock
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from tests.fixtures.nvidia import profile

CONFIG = """\
    version: v1
    sharing:
      timeSlicing:
        resources:
        - {name: nvidia.com/gpu, devices: [0], replicas: 2, rename: nvidia.com/gpu.shared}
      mps:
        resources:
        - {name: nvidia.com/gpu, devices: [1], replicas: 2, rename: nvidia.com/gpu.mps}
    """
TIME_SLICED = "nvidia.com/gpu.shared"
MPS = "nvidia.com/gpu.mps"
GPU_CONFIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}


def gpu_config(sharing: Mapping[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {**GPU_CONFIG, **({"sharing": sharing} if sharing else {}), **fields}


def mps_config(**limits: Any) -> dict[str, Any]:
    return gpu_config({"strategy": "MPS", "mpsConfig": limits})


# The daemons' locks of the nodes made so far: held for the rest of the session, as a
# running daemon holds its own (one file descriptor per node).
_DAEMONS: list[DaemonLock] = []


def sharing_node(tmp_path: Path) -> tuple[NvidiaBackend, Path]:
    """The backend, and its MPS root (the daemon's ``.started`` mark and lock there)."""
    mps_root = tmp_path / "mps"
    started = mps_root / MPS / ".started"
    started.parent.mkdir(parents=True)
    started.touch()
    lock = DaemonLock(mps_root)
    assert lock.try_acquire()
    _DAEMONS.append(lock)
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(CONFIG))
    settings = resolve(Overrides(mps_root=str(mps_root)), load_config_file(path))
    nvml = SimulatedNvml(profile("pcie-4gpu"))
    backend = NvidiaBackend(nvml, settings, mig_minors=generated_mig_minors(4), wait_ms=50)
    return backend, mps_root
