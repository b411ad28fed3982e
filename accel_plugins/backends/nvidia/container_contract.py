"""NVIDIA's container contract: what a container gets for a set of GPUs.

As NVIDIA's plugin answers Allocate (``internal/plugin/server.go``,
``getAllocateResponse``), per device-list strategy (combinable):

- ``envvar``: ``NVIDIA_VISIBLE_DEVICES=<id>,<id>``, and
  ``NVIDIA_IMEX_CHANNELS=<id>`` when IMEX channels are configured.
- ``volume-mounts``: ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices``
  plus one mount of ``/dev/null`` at ``/var/run/nvidia-container-devices/<id>``
  per device and ``.../imex/<channel>`` per IMEX channel (an unprivileged pod
  cannot forge mounts, so it cannot widen its own device list through the
  environment). Wins over ``envvar``'s value.
- ``cdi-annotations``: annotation ``cdi.k8s.io/nvidia-device-plugin_<response>``
  listing the CDI names ``k8s.device-plugin.nvidia.com/gpu=<id>`` (and
  ``k8s.device-plugin.nvidia.com/imex-channel=<id>``), whose spec ``cdi_spec.py``
  writes.
- ``cdi-cri``: the same names in the response's ``cdi_devices`` field.

``<id>`` is the UUID or the index (``0``, or ``0:1`` for a MIG device) per the
device-ID strategy, in the kubelet's request order, replicas folded onto the
GPU they share. ``NVIDIA_GDRCOPY``, ``NVIDIA_GDS`` and ``NVIDIA_MOFED`` are
``enabled`` when switched on, whatever the strategy. With CDI strategies only,
that is all. Otherwise, with pass-device-specs and no CDI strategy (a device
named by CDI is injected by its spec; NVIDIA also passes the nodes then), the
device nodes under the dev root: the control nodes that exist
(``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
``/dev/nvidia-uvm-tools``, ``/dev/nvidia-modeset``), then each GPU's
``/dev/nvidiaN`` (the parent's for MIG), then the MIG capability nodes, then
the IMEX channel nodes.
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceNode, Mount

log = logging.getLogger(__name__)

ENVVAR = "envvar"
VOLUME_MOUNTS = "volume-mounts"
CDI_ANNOTATIONS = "cdi-annotations"
CDI_CRI = "cdi-cri"
DEVICE_LIST_STRATEGIES = (ENVVAR, VOLUME_MOUNTS, CDI_ANNOTATIONS, CDI_CRI)
CDI_STRATEGIES = (CDI_ANNOTATIONS, CDI_CRI)
DEVICE_ID_STRATEGIES = ("uuid", "index")

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNT_ROOT = "/var/run/nvidia-container-devices"
VOLUME_MOUNT_SOURCE = "/dev/null"
CDI_VENDOR = "k8s.device-plugin.nvidia.com"
"""The vendor NVIDIA's plugin gives its own specs (cmd/nvidia-device-plugin/plugin-manager.go)."""
CDI_KIND = f"{CDI_VENDOR}/gpu"
CDI_IMEX_KIND = f"{CDI_VENDOR}/imex-channel"
DEFAULT_CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
CDI_ANNOTATION_PLUGIN = "nvidia-device-plugin"
CONTROL_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
"""Passed with device specs when they exist, in NVIDIA's order (nvml_manager.go)."""
IMEX_CHANNELS_ENV = "NVIDIA_IMEX_CHANNELS"
IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
FEATURE_ENVS = (
    ("NVIDIA_GDRCOPY", "gdrcopy_enabled"),
    ("NVIDIA_GDS", "gds_enabled"),
    ("NVIDIA_MOFED", "mofed_enabled"),
)
MIG_MINORS_FILE = "/proc/driver/nvidia-caps/mig-minors"
_RESPONSE_NAMESPACE = "0b7e9b4c-64a5-4d0e-9a38-4f2b7f1d9e11"  # a uuid5 namespace


@dataclass(frozen=True, slots=True)
class ImexChannel:
    """One IMEX channel a container gets: its ``id`` and its node (:attr:`path`)."""

    id: str

    @property
    def path(self) -> str:
        return f"{IMEX_CHANNEL_DIR}/channel{self.id}"


@dataclass(frozen=True, slots=True)
class AllocateSettings:
    device_list_strategies: tuple[str, ...] = (ENVVAR,)
    device_id_strategy: str = "uuid"
    pass_device_specs: bool = False
    dev_root: Path = Path("/")
    """Where the device nodes are on the host (NVIDIA's nvidiaDevRoot); the plugin sees
    them at the same path (the chart mounts the driver root there)."""
    cdi_annotation_prefix: str = DEFAULT_CDI_ANNOTATION_PREFIX
    gdrcopy_enabled: bool = False
    gds_enabled: bool = False
    mofed_enabled: bool = False
    imex_channels: tuple[ImexChannel, ...] = ()
    """The configured channels found at start (:func:`find_imex_channels`)."""


def host_path(dev_root: Path, path: str) -> str:
    """``/dev/nvidia0`` under the dev root (``/run/nvidia/driver/dev/nvidia0``)."""
    return str(PurePosixPath(str(dev_root)) / path.lstrip("/"))


def device_node(dev_root: Path, path: str) -> DeviceNode:
    return DeviceNode(host_path=host_path(dev_root, path), container_path=path, permissions="rw")


def gpu_nodes(dev_root: Path, minor: int) -> tuple[DeviceNode, ...]:
    return (device_node(dev_root, f"/dev/nvidia{minor}"),)


def mig_nodes(
    dev_root: Path,
    parent_minor: int,
    gpu_instance: int,
    compute_instance: int,
    mig_minors: Mapping[str, int],
) -> tuple[DeviceNode, ...]:
    """The parent GPU's node plus the GI and CI capability nodes that grant the MIG device."""
    nodes = [device_node(dev_root, f"/dev/nvidia{parent_minor}")]
    gi = f"gpu{parent_minor}/gi{gpu_instance}/access"
    ci = f"gpu{parent_minor}/gi{gpu_instance}/ci{compute_instance}/access"
    for key in (gi, ci):
        if key in mig_minors:
            nodes.append(device_node(dev_root, f"/dev/nvidia-caps/nvidia-cap{mig_minors[key]}"))
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


def generated_mig_minors(
    gpus: int, *, gpu_instances: int = 15, compute: int = 8
) -> Mapping[str, int]:
    """A table laid out like the driver's (config, monitor, then per GPU/GI/CI), for simulation."""
    return _MigMinorLayout(gpus, gpu_instances, compute)


class _MigMinorLayout(Mapping[str, int]):
    """The driver's MIG capability table, by arithmetic: the same entries as the file
    would list, without holding a thousand strings per eight GPUs (issue 34)."""

    def __init__(self, gpus: int, gpu_instances: int, compute: int) -> None:
        self._gpus, self._gpu_instances, self._compute = gpus, gpu_instances, compute

    def __getitem__(self, key: str) -> int:
        if key in ("config", "monitor"):
            return 1 if key == "config" else 2
        parts = key.split("/")
        if len(parts) not in (3, 4) or parts[-1] != "access":
            raise KeyError(key)
        gpu = _index(key, parts[0], "gpu", self._gpus)
        gi = _index(key, parts[1], "gi", self._gpu_instances)
        minor = 3 + (gpu * self._gpu_instances + gi) * (1 + self._compute)
        if len(parts) == 4:
            minor += 1 + _index(key, parts[2], "ci", self._compute)
        return minor

    def __iter__(self) -> Iterator[str]:
        yield from ("config", "monitor")
        for gpu in range(self._gpus):
            for gi in range(self._gpu_instances):
                yield f"gpu{gpu}/gi{gi}/access"
                for ci in range(self._compute):
                    yield f"gpu{gpu}/gi{gi}/ci{ci}/access"

    def __len__(self) -> int:
        return 2 + self._gpus * self._gpu_instances * (1 + self._compute)


def _index(key: str, part: str, prefix: str, bound: int) -> int:
    """``gpu3`` -> 3 for prefix ``gpu`` below ``bound``; else ``key`` is not in the table."""
    digits = part.removeprefix(prefix)
    if digits == part or not digits.isdigit() or int(digits) >= bound:
        raise KeyError(key)
    return int(digits)


def _is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False


def find_imex_channels(
    channel_ids: Sequence[int],
    dev_root: Path,
    *,
    required: bool,
    source: tuple[str, str] = ("imex", "channelIDs"),
) -> tuple[ImexChannel, ...]:
    """The configured IMEX channels whose node exists (a character device) under the dev
    root or at its own path, as NVIDIA's ``imex.GetChannels`` checks at start.

    A missing channel is skipped with a warning, or a ConfigError when ``required``.
    """
    found: list[ImexChannel] = []
    for number in channel_ids:
        channel = ImexChannel(str(number))
        places = dict.fromkeys([Path(host_path(dev_root, channel.path)), Path(channel.path)])
        if any(_is_char_device(p) for p in places):
            log.info("IMEX channel channel%s selected", channel.id)
            found.append(channel)
            continue
        where = " or ".join(str(p) for p in places)
        if required:
            raise ConfigError(
                *source,
                f"requested IMEX channel channel{channel.id} does not exist ({where} is no "
                "character device) and IMEX channels are required",
            )
        log.warning("ignoring requested IMEX channel channel%s: no device at %s", channel.id, where)
    return tuple(found)


def runtime_ids(devices: Sequence[Device], id_strategy: str) -> list[str]:
    """The IDs the container runtime sees: in request order, replicas folded onto their GPU."""
    out: list[str] = []
    for device in devices:
        facts = gpu_facts(device)
        value = facts.uuid if id_strategy == "uuid" else facts.index
        if value not in out:
            out.append(value)
    return out


def device_specs(devices: Sequence[Device], settings: AllocateSettings) -> tuple[DeviceNode, ...]:
    """Control nodes that exist, the GPUs' nodes, the MIG capability nodes, the IMEX channels."""
    root = settings.dev_root
    nodes = [device_node(root, p) for p in CONTROL_NODES if Path(host_path(root, p)).exists()]
    own = [node for device in devices for node in device.nodes]
    gpus = [n for n in own if not n.container_path.startswith("/dev/nvidia-caps/")]
    caps = [n for n in own if n.container_path.startswith("/dev/nvidia-caps/")]
    imex = [device_node(root, channel.path) for channel in settings.imex_channels]
    return tuple(dict.fromkeys([*nodes, *gpus, *caps, *imex]))


def container_allocation(
    devices: Sequence[Device], settings: AllocateSettings
) -> ContainerAllocation:
    ids = runtime_ids(devices, settings.device_id_strategy)
    channels = [channel.id for channel in settings.imex_channels]
    strategies = settings.device_list_strategies
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    annotations: dict[str, str] = {}
    cdi: tuple[str, ...] = ()
    names = (
        *(f"{CDI_KIND}={i}" for i in ids),
        *(f"{CDI_IMEX_KIND}={c}" for c in channels),
    )
    if CDI_ANNOTATIONS in strategies and names:  # no names, no annotation (as NVIDIA)
        import uuid  # only for cdi-annotations answers; off the start path

        response = uuid.uuid5(uuid.UUID(_RESPONSE_NAMESPACE), ",".join(ids))
        key = f"{settings.cdi_annotation_prefix}{CDI_ANNOTATION_PLUGIN}_{response}"
        annotations[key] = ",".join(names)
    if CDI_CRI in strategies:
        cdi = names
    for name, attribute in FEATURE_ENVS:
        if getattr(settings, attribute):
            envs[name] = "enabled"
    nodes: tuple[DeviceNode, ...] = ()
    if any(s not in CDI_STRATEGIES for s in strategies):
        if ENVVAR in strategies:
            envs[VISIBLE_DEVICES] = ",".join(ids)
            if channels:
                envs[IMEX_CHANNELS_ENV] = ",".join(channels)
        if VOLUME_MOUNTS in strategies:
            envs[VISIBLE_DEVICES] = VOLUME_MOUNT_ROOT
            paths = [*ids, *(f"imex/{c}" for c in channels)]
            mounts = [
                Mount(host_path=VOLUME_MOUNT_SOURCE, container_path=f"{VOLUME_MOUNT_ROOT}/{p}")
                for p in paths
            ]
        if settings.pass_device_specs and not any(s in CDI_STRATEGIES for s in strategies):
            nodes = device_specs(devices, settings)
    return ContainerAllocation(
        nodes=nodes,
        mounts=tuple(mounts),
        envs=envs,
        annotations=annotations,
        cdi_devices=cdi,
    )
