"""The NVIDIA backend's settings: NVIDIA's names and limits, the values as frozen dataclasses.

What the config file sets (:class:`FileConfig`), what flags and their
environment twins set (:class:`Overrides`) and what the backend runs with once
they are merged (:class:`NvidiaSettings`), with the value forms flags share
with the file. Reading the file is :mod:`.config_file`; merging is :mod:`.resolve`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from accel_plugins.backends.nvidia.allocation.replica_policy import PACKED, POLICIES, SPREAD
from accel_plugins.backends.nvidia.config.config_syntax import is_uint
from accel_plugins.backends.nvidia.container_contract import (
    DEVICE_LIST_STRATEGIES,
    AllocateSettings,
)

MIG_STRATEGIES = ("none", "single", "mixed")
REPLICA_POLICIES = POLICIES
# NVIDIA's sharedDevicesAllocationPolicy values, and the replica policy each one names.
SHARED_DEVICES_POLICIES = ("distributed", "packed")
POLICY_OF_SHARED: dict[str, str] = {"distributed": SPREAD, "packed": PACKED}
DEVICE_DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra")
VERSION = "v1"
DEFAULT_RECOVERY_SECONDS = 60.0
DEFAULT_NVIDIA_CTK_PATH = "/usr/bin/nvidia-ctk"
DEFAULT_CONTAINER_DRIVER_ROOT = "/driver-root"
VALID_IMEX_CHANNEL_IDS = ((), (0,))
# A million replicas took half a minute to build and could never reach the kubelet
# (4 MiB ListAndWatch limit, ~70,000 devices); refuse absurd counts up front.
MAX_REPLICAS = 10_000
# NVIDIA's mps-control-daemon (mps/device.go): 48 clients per MPS server from Volta on
# (16 before; our NVML adapter reads no compute capability, and current drivers need Volta+).
MPS_MAX_CLIENTS = 48
DEFAULT_MPS_ROOT = "/run/nvidia/mps"
"""Where NVIDIA's chart puts the MPS root on the host (values.yaml ``mps.root``)."""


@dataclass(frozen=True, slots=True)
class ReplicaDevices:
    """Which devices of a resource are shared: all, the first ``count``, or ``refs``."""

    all: bool = False
    count: int = 0
    refs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicatedResource:
    name: str
    rename: str
    devices: ReplicaDevices
    replicas: int
    where: str = ""
    """Field path in the file, for errors found once devices are known."""


@dataclass(frozen=True, slots=True)
class TimeSlicing:
    """A ``sharing.timeSlicing`` (or ``sharing.mps``) section: NVIDIA's ReplicatedResources."""

    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[ReplicatedResource, ...] = ()


def share_all(
    replicas: int, *, resource: str = "nvidia.com/gpu", rename_by_default: bool = False
) -> TimeSlicing:
    """Time-slice every device of ``resource`` (what ``demo`` shows), as a config would."""
    rename = f"{resource}.shared" if rename_by_default else resource
    entry = ReplicatedResource(resource, rename, ReplicaDevices(all=True), replicas, "share_all")
    return TimeSlicing(rename_by_default=rename_by_default, resources=(entry,))


@dataclass(frozen=True, slots=True)
class GfdFlags:
    """``flags.gfd``: gpu-feature-discovery's; parsed and checked, not used by the plugin."""

    oneshot: bool | None = None
    no_timestamp: bool | None = None
    sleep_interval: float | None = None
    """Seconds; ``inf`` for ``infinite``."""
    output_file: str | None = None
    machine_type_file: str | None = None


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """One ``resources.gpus``/``mig`` entry: devices matching ``pattern`` become ``name``."""

    pattern: str
    name: str

    def matches(self, text: str) -> bool:
        """NVIDIA's wildcard match: ``*`` is any run of characters, the rest literal, all of it."""
        regex = ".*".join(re.escape(part) for part in self.pattern.split("*"))
        return re.fullmatch(regex, text) is not None


@dataclass(frozen=True, slots=True)
class Imex:
    """``imex``: the IMEX channels every container with a device gets."""

    channel_ids: tuple[int, ...] = ()
    required: bool = False


@dataclass(frozen=True, slots=True)
class FileConfig:
    """What a config file sets; None means "not set here".

    Values NVIDIA checks only after merging flags (the strategies, the
    policies, the IMEX channel IDs) are kept as written; :func:`resolve`
    checks what is left of them.
    """

    source: str
    mig_strategy: str | None = None
    fail_on_init_error: bool | None = None
    mps_root: str | None = None
    nvidia_driver_root: str | None = None
    nvidia_dev_root: str | None = None
    gdrcopy_enabled: bool | None = None
    gds_enabled: bool | None = None
    mofed_enabled: bool | None = None
    use_node_feature_api: bool | None = None
    device_discovery_strategy: str | None = None
    pass_device_specs: bool | None = None
    device_list_strategy: tuple[str, ...] | None = None
    device_id_strategy: str | None = None
    cdi_annotation_prefix: str | None = None
    nvidia_ctk_path: str | None = None
    container_driver_root: str | None = None
    shared_devices_allocation_policy: str | None = None
    gfd: GfdFlags | None = None
    resources_gpus: tuple[ResourcePattern, ...] = ()
    resources_mig: tuple[ResourcePattern, ...] = ()
    time_slicing: TimeSlicing = field(default_factory=TimeSlicing)
    mps: TimeSlicing | None = None
    replica_policy: str | None = None
    """Ours: ``sharing.timeSlicing.replicaPolicy`` (spread or packed)."""
    imex_channel_ids: tuple[int, ...] | None = None
    imex_required: bool | None = None
    ignored: tuple[str, ...] = ()
    """Field paths of the keys NVIDIA's v1 does not define (loaded with a warning)."""


@dataclass(frozen=True, slots=True)
class Overrides:
    """Values from flags or their environment twins; None means "not given"."""

    mig_strategy: str | None = None
    fail_on_init_error: bool | None = None
    mps_root: str | None = None
    nvidia_driver_root: str | None = None
    nvidia_dev_root: str | None = None
    gdrcopy_enabled: bool | None = None
    gds_enabled: bool | None = None
    mofed_enabled: bool | None = None
    device_discovery_strategy: str | None = None
    pass_device_specs: bool | None = None
    device_list_strategy: tuple[str, ...] | None = None
    device_id_strategy: str | None = None
    cdi_annotation_prefix: str | None = None
    nvidia_ctk_path: str | None = None
    container_driver_root: str | None = None
    imex_channel_ids: tuple[int, ...] | None = None
    imex_required: bool | None = None
    cdi_feature_flags: tuple[str, ...] | None = None
    cdi_disable_hooks: tuple[str, ...] | None = None
    health_recovery_seconds: float | None = None
    replica_policy: str | None = None
    shared_devices_allocation_policy: str | None = None


@dataclass(frozen=True, slots=True)
class NvidiaSettings:
    """The resolved configuration the backend runs with."""

    mig_strategy: str = "none"
    fail_on_init_error: bool = True
    driver_root: Path = Path("/")
    dev_root: Path = Path("/")
    """Where the GPU device nodes are on the host (NVIDIA's nvidiaDevRoot)."""
    allocate: AllocateSettings = field(default_factory=AllocateSettings)
    time_slicing: TimeSlicing = field(default_factory=TimeSlicing)
    mps: TimeSlicing | None = None
    """``sharing.mps``, validated; served once the MPS control daemon exists."""
    mps_root: str = ""
    replica_policy: str = SPREAD
    """How GetPreferredAllocation picks time-sliced replicas: spread or packed."""
    device_discovery_strategy: str = "auto"
    nvidia_ctk_path: str = DEFAULT_NVIDIA_CTK_PATH
    container_driver_root: str = DEFAULT_CONTAINER_DRIVER_ROOT
    cdi_feature_flags: tuple[str, ...] = ()
    cdi_disable_hooks: tuple[str, ...] = ()
    imex: Imex = field(default_factory=Imex)
    imex_source: tuple[str, str] = ("", "")
    """(source, field) of the IMEX channel IDs, for errors about them."""
    disable_healthchecks: str = ""
    enable_healthchecks: str = ""
    health_recovery_seconds: float = DEFAULT_RECOVERY_SECONDS
    source: str | None = None


def parse_device_list_strategy(text: str) -> tuple[str, ...]:
    """``envvar,cdi-annotations`` -> a validated tuple (flag and env form), repeats dropped."""
    items = tuple(part.strip() for part in text.split(",") if part.strip())
    check_strategies(items, ValueError)
    return tuple(dict.fromkeys(items))


def parse_channel_ids(text: str) -> tuple[int, ...]:
    """``0`` or ``0,1`` (flag and env form of ``--imex-channel-ids``)."""
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not all(is_uint(item) for item in items):
        raise ValueError(f"expected channel numbers separated by commas, got {text!r}")
    return tuple(int(item) for item in items)


def parse_list(text: str) -> tuple[str, ...]:
    """``a,b`` -> ("a", "b"): a comma-separated flag value (urfave/cli's string slice)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def check_strategies(items: Sequence[str], make: Callable[[str], Exception]) -> None:
    """Refuse an unknown device-list strategy with ``make(reason)``."""
    for item in items:
        if item not in DEVICE_LIST_STRATEGIES:
            raise make(f"unknown strategy {item!r} (known: {', '.join(DEVICE_LIST_STRATEGIES)})")
