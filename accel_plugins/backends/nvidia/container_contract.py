"""NVIDIA's container contract: what a container gets for a set of GPUs.

Device-list strategies (combinable, as in NVIDIA's plugin):

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<id>,<id>``.
- ``volume-mounts``: ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices``
  plus one mount of ``/dev/null`` at ``/var/run/nvidia-container-devices/<id>``
  per device (an unprivileged pod cannot forge mounts, so it cannot widen its
  own device list through the environment). Wins over ``envvar``'s value.
- ``cdi-annotations``: annotation ``cdi.k8s.io/nvidia-device-plugin_<response>``
  listing ``nvidia.com/gpu=<id>`` CDI names.
- ``cdi-cri``: the same names in the response's ``cdi_devices`` field.

``<id>`` is the UUID or the index (``0``, or ``0:1`` for a MIG device) per
the device-ID strategy, listed in GPU index order. Replicas resolve to the GPU they share. With
pass-device-specs the response also lists the device nodes under the driver
root: each GPU's ``/dev/nvidiaN`` (the parent's for MIG, plus the MIG
capability nodes), ``/dev/nvidiactl``, ``/dev/nvidia-uvm`` and
``/dev/nvidia-uvm-tools``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceNode, Mount

ENVVAR = "envvar"
VOLUME_MOUNTS = "volume-mounts"
CDI_ANNOTATIONS = "cdi-annotations"
CDI_CRI = "cdi-cri"
DEVICE_LIST_STRATEGIES = (ENVVAR, VOLUME_MOUNTS, CDI_ANNOTATIONS, CDI_CRI)
DEVICE_ID_STRATEGIES = ("uuid", "index")

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
VOLUME_MOUNT_SOURCE = "/dev/null"
CDI_KIND = "nvidia.com/gpu"
DEFAULT_CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
CDI_ANNOTATION_PLUGIN = "nvidia-device-plugin"
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MIG_MINORS_FILE = "/proc/driver/nvidia-caps/mig-minors"
_RESPONSE_NAMESPACE = uuid.UUID("0b7e9b4c-64a5-4d0e-9a38-4f2b7f1d9e11")


@dataclass(frozen=True, slots=True)
class AllocateSettings:
    device_list_strategies: tuple[str, ...] = (ENVVAR,)
    device_id_strategy: str = "uuid"
    pass_device_specs: bool = False
    driver_root: Path = Path("/")
    cdi_annotation_prefix: str = DEFAULT_CDI_ANNOTATION_PREFIX


def host_path(driver_root: Path, path: str) -> str:
    """``/dev/nvidia0`` under the driver root (``/run/nvidia/driver/dev/nvidia0``)."""
    return str(PurePosixPath(str(driver_root)) / path.lstrip("/"))


def device_node(driver_root: Path, path: str) -> DeviceNode:
    return DeviceNode(host_path=host_path(driver_root, path), container_path=path, permissions="rw")


def gpu_nodes(driver_root: Path, minor: int) -> tuple[DeviceNode, ...]:
    return (device_node(driver_root, f"/dev/nvidia{minor}"),)


def mig_nodes(
    driver_root: Path,
    parent_minor: int,
    gpu_instance: int,
    compute_instance: int,
    mig_minors: Mapping[str, int],
) -> tuple[DeviceNode, ...]:
    """The parent GPU's node plus the GI and CI capability nodes that grant the MIG device."""
    nodes = [device_node(driver_root, f"/dev/nvidia{parent_minor}")]
    gi = f"gpu{parent_minor}/gi{gpu_instance}/access"
    ci = f"gpu{parent_minor}/gi{gpu_instance}/ci{compute_instance}/access"
    for key in (gi, ci):
        if key in mig_minors:
            nodes.append(device_node(driver_root, f"/dev/nvidia-caps/nvidia-cap{mig_minors[key]}"))
    return tuple(nodes)


def read_mig_minors(path: Path = Path(MIG_MINORS_FILE)) -> dict[str, int]:
    """Parse the driver's ``name minor`` table; empty when the file is absent."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    table: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            table[parts[0]] = int(parts[1])
    return table


def generated_mig_minors(gpus: int, *, gpu_instances: int = 15, compute: int = 8) -> dict[str, int]:
    """A table laid out like the driver's (config, monitor, then per GPU/GI/CI), for simulation."""
    table = {"config": 1, "monitor": 2}
    minor = 3
    for gpu in range(gpus):
        for gi in range(gpu_instances):
            table[f"gpu{gpu}/gi{gi}/access"] = minor
            minor += 1
            for ci in range(compute):
                table[f"gpu{gpu}/gi{gi}/ci{ci}/access"] = minor
                minor += 1
    return table


def _position(device: Device) -> tuple[int, ...]:
    return tuple(int(p) for p in gpu_facts(device).index.split(":") if p.isdigit())


def runtime_ids(devices: Sequence[Device], id_strategy: str) -> list[str]:
    """The IDs the container runtime sees: in GPU index order (the kubelet's
    request order is arbitrary), replicas folded onto their GPU."""
    out: list[str] = []
    for device in sorted(devices, key=_position):
        facts = gpu_facts(device)
        value = facts.uuid if id_strategy == "uuid" else facts.index
        if value not in out:
            out.append(value)
    return out


def container_allocation(
    devices: Sequence[Device], settings: AllocateSettings
) -> ContainerAllocation:
    ids = runtime_ids(devices, settings.device_id_strategy)
    strategies = settings.device_list_strategies
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    annotations: dict[str, str] = {}
    cdi: tuple[str, ...] = ()
    if ENVVAR in strategies:
        envs[VISIBLE_DEVICES] = ",".join(ids)
    if VOLUME_MOUNTS in strategies:
        envs[VISIBLE_DEVICES] = VOLUME_MOUNT_ROOT
        mounts = [
            Mount(host_path=VOLUME_MOUNT_SOURCE, container_path=f"{VOLUME_MOUNT_ROOT}/{i}")
            for i in ids
        ]
    names = tuple(f"{CDI_KIND}={i}" for i in ids)
    if CDI_ANNOTATIONS in strategies:
        response = uuid.uuid5(_RESPONSE_NAMESPACE, ",".join(ids))
        key = f"{settings.cdi_annotation_prefix}{CDI_ANNOTATION_PLUGIN}_{response}"
        annotations[key] = ",".join(names)
    if CDI_CRI in strategies:
        cdi = names
    nodes: list[DeviceNode] = []
    if settings.pass_device_specs:
        for device in sorted(devices, key=_position):
            nodes.extend(n for n in device.nodes if n not in nodes)
        nodes.extend(device_node(settings.driver_root, p) for p in CONTROL_NODES)
    return ContainerAllocation(
        nodes=tuple(nodes),
        mounts=tuple(mounts),
        envs=envs,
        annotations=annotations,
        cdi_devices=cdi,
    )
