"""Read the node's GPUs, their MIG devices and the pairwise link matrix from NVML."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from accel_plugins.backends.nvidia.allocation.pair_score import PCIE_OF_LEVEL, PairLink
from accel_plugins.backends.nvidia.errors import GpuLostError, NvmlError, NvmlNotSupportedError
from accel_plugins.backends.nvidia.nvml import Handle, MigPlacement, Nvml

log = logging.getLogger(__name__)

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MigDevice:
    """A MIG device; ``index`` is NVIDIA's ``<gpu>:<mig>`` form."""

    uuid: str
    index: str
    profile: str
    gpu_instance: int
    compute_instance: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Gpu:
    """A physical GPU as discovered.

    ``links`` is its row of the topology matrix, one pair token per GPU
    (``NV2+SYS``: direct NVLinks and PCIe relation, see :mod:`.pair_score`;
    "X" for itself), and ``peers`` the GPU index of each entry (the same as
    the position unless a GPU was lost at discovery).
    """

    index: int
    uuid: str
    minor: int
    name: str
    memory_mib: int
    pci_bus_id: str
    numa_node: int | None
    mig_enabled: bool
    migs: tuple[MigDevice, ...] = ()
    brand: int = 0  # NVML_BRAND_*; 0 (unknown) where NVML does not say
    links: tuple[str, ...] = ()
    peers: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    gpus: tuple[Gpu, ...]
    lost: tuple[int, ...] = ()
    """Indices of GPUs that answered GPU-is-lost during discovery (left out of ``gpus``)."""


def mig_profile_name(placement: MigPlacement) -> str:
    """NVIDIA's profile naming: ``<g>g.<GB>gb``, or ``<c>c.<g>g.<GB>gb`` for shared GIs.

    Memory is rounded up to whole GB, as nvidia-smi names profiles
    (4864 MiB -> ``5gb``).
    """
    gb = math.ceil(placement.memory_mib / 1024)
    base = f"{placement.gpu_slices}g.{gb}gb"
    if placement.compute_slices != placement.gpu_slices:
        return f"{placement.compute_slices}c.{base}"
    return base


def discover(nvml: Nvml) -> Node:
    """Everything the backend publishes; NVML must be initialised.

    A GPU that reports itself lost is left out (and listed in ``Node.lost``)
    so one dead GPU does not hide the others; any other NVML error is raised.
    """
    handles: list[Handle] = []
    partial: list[Gpu] = []
    lost: list[int] = []
    for index in range(nvml.device_count()):
        try:
            handle = nvml.device_handle(index)
            gpu = _read_gpu(nvml, index, handle)
        except GpuLostError as exc:
            log.warning("GPU %d is lost and left out: %s", index, exc)
            lost.append(index)
            continue
        handles.append(handle)
        partial.append(gpu)
    rows = link_matrix(nvml, handles, [g.pci_bus_id for g in partial])
    peers = tuple(g.index for g in partial)
    gpus = tuple(
        dataclasses.replace(g, links=row, peers=peers) for g, row in zip(partial, rows, strict=True)
    )
    return Node(gpus=gpus, lost=tuple(lost))


def _read_gpu(nvml: Nvml, index: int, handle: Handle) -> Gpu:
    mig_enabled = nvml.mig_enabled(handle)
    migs: list[MigDevice] = []
    if mig_enabled:
        for position, mig in enumerate(nvml.mig_handles(handle)):
            placement = nvml.mig_placement(mig)
            migs.append(
                MigDevice(
                    uuid=nvml.uuid(mig),
                    index=f"{index}:{position}",
                    profile=mig_profile_name(placement),
                    gpu_instance=placement.gpu_instance,
                    compute_instance=placement.compute_instance,
                    memory_mib=placement.memory_mib,
                )
            )
    return Gpu(
        index=index,
        uuid=nvml.uuid(handle),
        minor=nvml.minor(handle),
        name=nvml.name(handle),
        memory_mib=nvml.memory_total(handle) // _MIB,
        pci_bus_id=nvml.pci_bus_id(handle),
        numa_node=nvml.numa_node(handle),
        mig_enabled=mig_enabled,
        migs=tuple(migs),
        brand=_brand(nvml, handle),
    )


def _brand(nvml: Nvml, handle: Handle) -> int:
    """The GPU's brand; 0 (unknown) where NVML cannot say: it only names the product."""
    try:
        return nvml.brand(handle)
    except NvmlNotSupportedError:  # a missing function is one too
        return 0


def link_matrix(
    nvml: Nvml, handles: Sequence[Handle], bus_ids: Sequence[str]
) -> list[tuple[str, ...]]:
    """Pair tokens (``NV<n>+<relation>``) between every pair of GPUs, "X" on the diagonal.

    Both facts are read as NVIDIA's allocator reads them: the PCIe relation
    from the GPUs' common ancestor, and the direct NVLinks as the active
    links whose remote PCI device is the other GPU. Links into an NVSwitch
    (a remote that is no GPU of the node) are not GPU-to-GPU links and count
    nothing. A link counts once even if only one end reports it, so the
    matrix stays symmetric. A relation NVML cannot tell is left unknown.
    """
    remotes: list[list[str]] = []
    for handle in handles:
        try:
            remotes.append(nvml.nvlink_remotes(handle))
        except NvmlError as exc:
            log.info("no NVLink information: %s", exc)
            remotes.append([])
    rows: list[list[str]] = [["X"] * len(handles) for _ in handles]
    for i, first in enumerate(handles):
        for j in range(i + 1, len(handles)):
            links = max(remotes[i].count(bus_ids[j]), remotes[j].count(bus_ids[i]))
            try:
                level = nvml.topology_level(first, handles[j])
            except NvmlError as exc:
                log.info("no PCIe topology between GPUs %d and %d: %s", i, j, exc)
                level = -1
            relation = PCIE_OF_LEVEL.get(level)
            if relation is None and level != -1:
                log.info("GPUs %d and %d: unknown topology level %d", i, j, level)
            rows[i][j] = rows[j][i] = PairLink(nvlinks=links, pcie=relation).token
    return [tuple(row) for row in rows]
