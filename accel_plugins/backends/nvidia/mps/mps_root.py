"""The MPS root: where the control daemon and the plugin meet, and what a client gets.

Layout, as NVIDIA's ``cmd/mps-control-daemon/mps/root.go`` and ``main.go``
make it (a resource name's ``/`` makes a directory level)::

    <root>/.ready                       every control daemon of the node is up
    <root>/shm/                         the daemon's /dev/shm, shared with clients
    <root>/<resource>/pipe/             CUDA_MPS_PIPE_DIRECTORY of that resource's daemon
    <root>/<resource>/log/              CUDA_MPS_LOG_DIRECTORY
    <root>/<resource>/.started          that daemon is up and its limits are set

A container given an MPS replica (``internal/plugin/mps.go``, ``updateReponse``)
gets ``CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe`` and two mounts: the host's
pipe directory there, and ``<root>/shm`` at ``/dev/shm``. ``/mps`` is NVIDIA's
``ContainerRoot``, kept so images built for NVIDIA's plugin find the pipe.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from accel_plugins.plugin.device import ContainerAllocation, Mount

PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
CONTAINER_ROOT = PurePosixPath("/mps")
CONTAINER_SHM = "/dev/shm"
READY_FILE = ".ready"
STARTED_FILE = ".started"


@dataclass(frozen=True, slots=True)
class MpsRoot:
    """An MPS root directory (on the host, or where a container sees the host's)."""

    path: Path

    def resource_dir(self, resource: str) -> Path:
        return self.path / resource

    def pipe_dir(self, resource: str) -> Path:
        return self.path / resource / "pipe"

    def log_dir(self, resource: str) -> Path:
        return self.path / resource / "log"

    def started_file(self, resource: str) -> Path:
        return self.path / resource / STARTED_FILE

    @property
    def ready_file(self) -> Path:
        return self.path / READY_FILE

    @property
    def shm_dir(self) -> Path:
        return self.path / "shm"

    def is_started(self, resource: str) -> bool:
        """That resource's daemon is up and its limits are set."""
        return self.started_file(resource).exists()


def client_pipe_dir(resource: str) -> str:
    """Where a client container finds its resource's pipe directory."""
    return str(CONTAINER_ROOT / resource / "pipe")


def with_mps(
    allocation: ContainerAllocation, resource: str, host_root: Path
) -> ContainerAllocation:
    """``allocation`` plus NVIDIA's MPS contract for ``resource`` (whatever the device-list
    strategy, CDI-only included, as NVIDIA adds it before the strategy checks)."""
    root = MpsRoot(host_root)
    mounts = (
        Mount(host_path=str(root.pipe_dir(resource)), container_path=client_pipe_dir(resource)),
        Mount(host_path=str(root.shm_dir), container_path=CONTAINER_SHM),
    )
    envs = {**allocation.envs, PIPE_ENV: client_pipe_dir(resource)}
    return dataclasses.replace(allocation, mounts=(*mounts, *allocation.mounts), envs=envs)
