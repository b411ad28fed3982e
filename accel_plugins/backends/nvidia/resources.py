"""From discovered GPUs to resources, per NVIDIA's MIG strategies.

- ``none``: every GPU is one ``nvidia.com/gpu``, MIG mode or not.
- ``single``: when MIG is enabled, it must be enabled on every GPU with one
  profile everywhere; the MIG devices are then the ``nvidia.com/gpu`` units.
  Without MIG anywhere it is the same as ``none``.
- ``mixed``: GPUs without MIG are ``nvidia.com/gpu``; each MIG device is one
  ``nvidia.com/mig-<profile>``; a MIG-enabled GPU itself is not offered.

Device IDs are UUIDs (GPU-... or MIG-...), as in NVIDIA's plugin.
``Device.facts`` carries the facts allocation and the topology optimiser
read, as a :class:`~accel_plugins.backends.nvidia.facts.GpuFacts`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from accel_plugins.backends.nvidia.container_contract import gpu_nodes, mig_nodes
from accel_plugins.backends.nvidia.discovery import Gpu, MigDevice, Node
from accel_plugins.backends.nvidia.facts import GpuFacts
from accel_plugins.errors import BackendError
from accel_plugins.plugin.device import Device

GPU_RESOURCE = "nvidia.com/gpu"


class MigStrategyError(BackendError):
    """The GPUs' MIG layout does not fit the chosen MIG strategy."""


def mig_resource(profile: str) -> str:
    """``nvidia.com/mig-1g.10gb``; a ``+`` (``1g.10gb+me``) becomes ``.``, as NVIDIA names it
    (a resource name has no ``+``; ``rm.AddDefaultResourcesToConfig``)."""
    return f"nvidia.com/mig-{profile}".replace("+", ".")


def gpu_device(gpu: Gpu, *, dev_root: Path, device_specs: bool) -> Device:
    return Device(
        id=gpu.uuid,
        numa_nodes=() if gpu.numa_node is None else (gpu.numa_node,),
        nodes=gpu_nodes(dev_root, gpu.minor) if device_specs else (),
        facts=GpuFacts(
            kind="gpu",
            index=str(gpu.index),
            gpu_index=gpu.index,
            uuid=gpu.uuid,
            minor=gpu.minor,
            name=gpu.name,
            memory_mib=gpu.memory_mib,
            pci_bus_id=gpu.pci_bus_id,
            numa_node=gpu.numa_node,
            links=gpu.links,
            link_peers=gpu.peers,
            brand=gpu.brand,
        ),
    )


def mig_device(
    gpu: Gpu,
    mig: MigDevice,
    *,
    dev_root: Path,
    device_specs: bool,
    mig_minors: Mapping[str, int],
) -> Device:
    nodes = (
        mig_nodes(dev_root, gpu.minor, mig.gpu_instance, mig.compute_instance, mig_minors)
        if device_specs
        else ()
    )
    return Device(
        id=mig.uuid,
        numa_nodes=() if gpu.numa_node is None else (gpu.numa_node,),
        nodes=nodes,
        facts=GpuFacts(
            kind="mig",
            index=mig.index,
            gpu_index=gpu.index,
            uuid=mig.uuid,
            parent_uuid=gpu.uuid,
            minor=gpu.minor,
            name=gpu.name,
            memory_mib=mig.memory_mib,
            mig_profile=mig.profile,
            gpu_instance=mig.gpu_instance,
            compute_instance=mig.compute_instance,
            pci_bus_id=gpu.pci_bus_id,
            numa_node=gpu.numa_node,
            links=gpu.links,
            link_peers=gpu.peers,
            brand=gpu.brand,
        ),
    )


def build_resources(
    node: Node,
    strategy: str,
    *,
    dev_root: Path = Path("/"),
    device_specs: bool = False,
    mig_minors: Mapping[str, int] | None = None,
) -> dict[str, list[Device]]:
    """Resource name -> devices in discovery order. MigStrategyError on a misfit."""
    minors = mig_minors or {}

    def whole(gpu: Gpu) -> Device:
        return gpu_device(gpu, dev_root=dev_root, device_specs=device_specs)

    def part(gpu: Gpu, mig: MigDevice) -> Device:
        return mig_device(gpu, mig, dev_root=dev_root, device_specs=device_specs, mig_minors=minors)

    out: dict[str, list[Device]] = {}
    if strategy == "none":
        if node.gpus:
            out[GPU_RESOURCE] = [whole(g) for g in node.gpus]
        return out
    if strategy == "single":
        return _single(node, whole, part)
    if strategy == "mixed":
        for gpu in node.gpus:
            if not gpu.mig_enabled:
                out.setdefault(GPU_RESOURCE, []).append(whole(gpu))
                continue
            for mig in gpu.migs:
                out.setdefault(mig_resource(mig.profile), []).append(part(gpu, mig))
        return out
    raise MigStrategyError(f"unknown MIG strategy {strategy!r}")


def _single(
    node: Node,
    whole: Callable[[Gpu], Device],
    part: Callable[[Gpu, MigDevice], Device],
) -> dict[str, list[Device]]:
    enabled = [g for g in node.gpus if g.mig_enabled]
    if not enabled:
        return {GPU_RESOURCE: [whole(g) for g in node.gpus]} if node.gpus else {}
    if len(enabled) != len(node.gpus):
        plain = ", ".join(str(g.index) for g in node.gpus if not g.mig_enabled)
        raise MigStrategyError(
            f"MIG strategy 'single' needs MIG on every GPU or on none; GPUs {plain} have it off "
            "(use --mig-strategy=mixed for mixed nodes)"
        )
    empty = [str(g.index) for g in enabled if not g.migs]
    if empty:
        raise MigStrategyError(
            f"MIG strategy 'single': MIG is enabled on GPUs {', '.join(empty)} "
            "but no MIG devices are configured there"
        )
    profiles = sorted({m.profile for g in enabled for m in g.migs})
    if len(profiles) > 1:
        raise MigStrategyError(
            f"MIG strategy 'single' needs one MIG profile on all GPUs, found {', '.join(profiles)} "
            "(use --mig-strategy=mixed)"
        )
    return {GPU_RESOURCE: [part(g, m) for g in enabled for m in g.migs]}
