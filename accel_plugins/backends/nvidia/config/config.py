"""NVIDIA's plugin config file (format v1), and how it merges with flags and env.

Every field of NVIDIA's ``api/config/v1`` at NVIDIA's path, read as NVIDIA's
plugin reads it (see :mod:`config_syntax`: keys ignoring case, numbers as text
in string fields, null as unset)::

    version: v1                             # absent or empty: v1
    flags:
      migStrategy: none | single | mixed
      failOnInitError: true
      mpsRoot: /run/nvidia/mps
      nvidiaDriverRoot: /
      nvidiaDevRoot: /                      # default: the driver root
      gdrcopyEnabled: false                 # NVIDIA_GDRCOPY=enabled in every container
      gdsEnabled: false                     # NVIDIA_GDS=enabled
      mofedEnabled: false                   # NVIDIA_MOFED=enabled
      useNodeFeatureAPI: false              # GFD's
      deviceDiscoveryStrategy: auto | nvml | tegra
      plugin:
        passDeviceSpecs: false
        deviceListStrategy: envvar          # or a list: [envvar, cdi-annotations]
        deviceIDStrategy: uuid | index
        cdiAnnotationPrefix: cdi.k8s.io/
        nvidiaCTKPath: /usr/bin/nvidia-ctk
        containerDriverRoot: /driver-root
        sharedDevicesAllocationPolicy: distributed | packed
      gfd: {oneshot, noTimestamp, sleepInterval, outputFile, machineTypeFile}   # GFD's
    resources:                              # parsed and checked; ignored, as NVIDIA does
      gpus: [{pattern: "*", name: gpu}]
      mig: [{pattern: "1g.10gb", name: mig-1g.10gb}]
    sharing:
      timeSlicing:                          # or mps: the same shape
        renameByDefault: false
        failRequestsGreaterThanOne: false   # mps: default true
        replicaPolicy: spread               # ours: an alias (see below)
        resources:
          - name: nvidia.com/gpu            # any valid name; "gpu" is nvidia.com/gpu
            replicas: 4                     # >= 2
            rename: nvidia.com/gpu.shared   # optional
            devices: all                    # or a count, or [0, "1", "0:1", GPU-..., MIG-...]
    imex:
      channelIDs: [0]                       # [] or [0]
      required: false

What NVIDIA's parser refuses is refused here, exit 2 with the file, the field
path and the reason: replicas below 2 (above 48 for MPS, NVIDIA's
mps-control-daemon limit), ``timeSlicing`` or ``mps`` without resources, a
``devices`` entry that is no GPU index, MIG index or UUID, a
resource name NVIDIA's ``NewResourceName`` refuses, IMEX channel IDs other than
``[]`` or ``[0]``, unknown values of the strategies. Checks NVIDIA makes after
merging flags (``validateFlags``) are made in :func:`resolve`, so a flag can
override a bad file value as it can there. Keys NVIDIA does not define load,
as there, with a warning naming the closest known key; ``--strict-config``
refuses them.

MPS (``sharing.mps``) is served with ``accel-plugins mps-control-daemon``
(see :mod:`mps_daemon`); with both sections NVIDIA ignores ``timeSlicing``,
here both apply to disjoint GPUs (a resource both share wholly is refused).

Where we go beyond NVIDIA: ``rename`` and ``devices`` under sharing are
honoured (NVIDIA's plugin parses and then ignores them; a warning says so at
start), and the same ``name`` may appear in several entries whose ``devices``
do not overlap, each with its own ``replicas`` (NVIDIA's #1786). How a
request's time-sliced replicas are picked is NVIDIA's
``sharedDevicesAllocationPolicy``; our older names stay as aliases
(``sharing.timeSlicing.replicaPolicy`` and ``--replica-policy`` with
``spread`` = ``distributed``, or ``packed``); two names that disagree are an
error. Precedence is flag > env > file > built-in default.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from accel_plugins.backends.nvidia.allocation.replica_policy import PACKED, POLICIES, SPREAD
from accel_plugins.backends.nvidia.config.config_syntax import (
    GoReader,
    is_gpu_uuid,
    is_mig_index,
    is_mig_uuid,
    is_uint,
)
from accel_plugins.backends.nvidia.container_contract import (
    CDI_STRATEGIES,
    DEFAULT_CDI_ANNOTATION_PREFIX,
    DEVICE_ID_STRATEGIES,
    DEVICE_LIST_STRATEGIES,
    AllocateSettings,
)
from accel_plugins.configfields import plain_kind
from accel_plugins.errors import ConfigError

log = logging.getLogger(__name__)

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

# The keys of NVIDIA's structs (api/config/v1), in NVIDIA's order.
_TOP = ("version", "flags", "resources", "sharing", "imex")
_FLAGS = (
    "migStrategy",
    "failOnInitError",
    "mpsRoot",
    "nvidiaDriverRoot",
    "nvidiaDevRoot",
    "gdrcopyEnabled",
    "gdsEnabled",
    "mofedEnabled",
    "useNodeFeatureAPI",
    "deviceDiscoveryStrategy",
    "plugin",
    "gfd",
)
_PLUGIN = (
    "passDeviceSpecs",
    "deviceListStrategy",
    "deviceIDStrategy",
    "cdiAnnotationPrefix",
    "nvidiaCTKPath",
    "containerDriverRoot",
    "sharedDevicesAllocationPolicy",
)
_GFD = ("oneshot", "noTimestamp", "sleepInterval", "outputFile", "machineTypeFile")
_RESOURCES = ("gpus", "mig")
_RESOURCE = ("pattern", "name")
_SHARING = ("timeSlicing", "mps")
_REPLICATED = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_REPLICA = ("name", "rename", "devices", "replicas")
_IMEX = ("channelIDs", "required")
# Ours: sharing.timeSlicing.replicaPolicy (NVIDIA's plugin ignores it).
_TIME_SLICING = (*_REPLICATED, "replicaPolicy")


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
    _check_strategies(items, ValueError)
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


def _check_strategies(items: Sequence[str], make: Callable[[str], Exception]) -> None:
    for item in items:
        if item not in DEVICE_LIST_STRATEGIES:
            raise make(f"unknown strategy {item!r} (known: {', '.join(DEVICE_LIST_STRATEGIES)})")


def parse_config(data: object, source: str, *, strict: bool = False) -> FileConfig:
    """Validate a decoded config document as NVIDIA's parser does (an empty file is v1 defaults)."""
    r = GoReader(source, strict=strict)
    if data is not None and not isinstance(data, Mapping):
        raise r.fail(
            "", f"expected a mapping (version, flags, sharing, ...), got {plain_kind(data)}"
        )
    top = r.struct(data, "", _TOP)
    version = r.string(top.get("version"), "version") or VERSION
    if version != VERSION:
        raise r.fail("version", f"unknown version {version!r}; this plugin reads {VERSION!r}")
    flags = r.struct(top.get("flags"), "flags", _FLAGS)
    plugin = r.struct(flags.get("plugin"), "flags.plugin", _PLUGIN)
    sharing = r.struct(top.get("sharing"), "sharing", _SHARING)
    time_slicing, replica_policy = _parse_time_slicing(r, sharing)
    mps = None
    if sharing.get("mps") is not None:
        mps = _parse_replicated(r, sharing["mps"], "sharing.mps", _REPLICATED, mps=True)
        _check_mps_entries(r, time_slicing, mps)
    gpus, migs = _parse_resources(r, top.get("resources"))
    imex = r.struct(top.get("imex"), "imex", _IMEX)
    return FileConfig(
        source=source,
        mig_strategy=r.string(flags.get("migStrategy"), "flags.migStrategy"),
        fail_on_init_error=r.boolean(flags.get("failOnInitError"), "flags.failOnInitError"),
        mps_root=r.string(flags.get("mpsRoot"), "flags.mpsRoot"),
        nvidia_driver_root=r.string(flags.get("nvidiaDriverRoot"), "flags.nvidiaDriverRoot"),
        nvidia_dev_root=r.string(flags.get("nvidiaDevRoot"), "flags.nvidiaDevRoot"),
        gdrcopy_enabled=r.boolean(flags.get("gdrcopyEnabled"), "flags.gdrcopyEnabled"),
        gds_enabled=r.boolean(flags.get("gdsEnabled"), "flags.gdsEnabled"),
        mofed_enabled=r.boolean(flags.get("mofedEnabled"), "flags.mofedEnabled"),
        use_node_feature_api=r.boolean(flags.get("useNodeFeatureAPI"), "flags.useNodeFeatureAPI"),
        device_discovery_strategy=r.string(
            flags.get("deviceDiscoveryStrategy"), "flags.deviceDiscoveryStrategy"
        ),
        pass_device_specs=r.boolean(plugin.get("passDeviceSpecs"), "flags.plugin.passDeviceSpecs"),
        device_list_strategy=_parse_strategies(r, plugin.get("deviceListStrategy")),
        device_id_strategy=r.string(
            plugin.get("deviceIDStrategy"), "flags.plugin.deviceIDStrategy"
        ),
        cdi_annotation_prefix=r.string(
            plugin.get("cdiAnnotationPrefix"), "flags.plugin.cdiAnnotationPrefix"
        ),
        nvidia_ctk_path=r.string(plugin.get("nvidiaCTKPath"), "flags.plugin.nvidiaCTKPath"),
        container_driver_root=r.string(
            plugin.get("containerDriverRoot"), "flags.plugin.containerDriverRoot"
        ),
        shared_devices_allocation_policy=r.string(
            plugin.get("sharedDevicesAllocationPolicy"),
            "flags.plugin.sharedDevicesAllocationPolicy",
        ),
        gfd=_parse_gfd(r, flags.get("gfd")),
        resources_gpus=gpus,
        resources_mig=migs,
        time_slicing=time_slicing,
        mps=mps,
        replica_policy=replica_policy,
        imex_channel_ids=_parse_channel_ids(r, imex.get("channelIDs")),
        imex_required=r.boolean(imex.get("required"), "imex.required"),
        ignored=tuple(r.ignored),
    )


def _parse_strategies(r: GoReader, value: object) -> tuple[str, ...] | None:
    """A strategy or a list of them (NVIDIA's deviceListStrategyFlag); names checked later."""
    where = "flags.plugin.deviceListStrategy"
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise r.fail(where, f"expected a strategy or a list of them, got {value!r}")
    return tuple(items)


def _parse_gfd(r: GoReader, value: object) -> GfdFlags | None:
    if value is None:
        return None
    gfd = r.struct(value, "flags.gfd", _GFD)
    return GfdFlags(
        oneshot=r.boolean(gfd.get("oneshot"), "flags.gfd.oneshot"),
        no_timestamp=r.boolean(gfd.get("noTimestamp"), "flags.gfd.noTimestamp"),
        sleep_interval=r.duration(gfd.get("sleepInterval"), "flags.gfd.sleepInterval"),
        output_file=r.string(gfd.get("outputFile"), "flags.gfd.outputFile"),
        machine_type_file=r.string(gfd.get("machineTypeFile"), "flags.gfd.machineTypeFile"),
    )


def _parse_resources(
    r: GoReader, value: object
) -> tuple[tuple[ResourcePattern, ...], tuple[ResourcePattern, ...]]:
    resources = r.struct(value, "resources", _RESOURCES)
    out: list[tuple[ResourcePattern, ...]] = []
    for key in _RESOURCES:
        where = f"resources.{key}"
        items = resources.get(key)
        if items is None:
            out.append(())
            continue
        if not isinstance(items, list):
            raise r.fail(where, f"expected a list, got {plain_kind(items)}")
        out.append(tuple(_parse_pattern(r, item, f"{where}[{i}]") for i, item in enumerate(items)))
    if out[0] or out[1]:
        r.warn(
            "resources",
            "parsed and ignored: NVIDIA's plugin does not support customising it yet and "
            "ignores it too (resources keep NVIDIA's names)",
        )
    return out[0], out[1]


def _parse_pattern(r: GoReader, value: object, where: str) -> ResourcePattern:
    if not isinstance(value, Mapping):
        raise r.fail(where, f"expected a mapping with pattern and name, got {plain_kind(value)}")
    entry = r.struct(value, where, _RESOURCE, fold=False)
    for key in _RESOURCE:
        if key not in entry:
            raise r.fail(f"{where}.{key}", f"resources must have a '{key}' field set")
    pattern = entry["pattern"]
    if not isinstance(pattern, str):
        raise r.fail(f"{where}.pattern", f"expected a string, got {plain_kind(pattern)}")
    return ResourcePattern(pattern, r.resource(entry["name"], f"{where}.name"))


def _parse_channel_ids(r: GoReader, value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise r.fail("imex.channelIDs", f"expected a list of channel IDs, got {plain_kind(value)}")
    ids = [r.integer(item, f"imex.channelIDs[{i}]") for i, item in enumerate(value)]
    return tuple(0 if i is None else i for i in ids)


def _parse_time_slicing(
    r: GoReader, sharing: Mapping[str, object]
) -> tuple[TimeSlicing, str | None]:
    if "timeSlicing" not in sharing:
        return TimeSlicing(), None
    where = "sharing.timeSlicing"
    value = sharing["timeSlicing"]
    ts = _parse_replicated(r, value, where, _TIME_SLICING, mps=False)
    section = value if isinstance(value, Mapping) else {}
    policy = section.get("replicaPolicy")
    if policy is not None and policy not in REPLICA_POLICIES:
        raise r.fail(f"{where}.replicaPolicy", f"{policy!r} is not one of {', '.join(POLICIES)}")
    return ts, policy if isinstance(policy, str) else None


def _parse_replicated(
    r: GoReader, value: object, where: str, known: Sequence[str], *, mps: bool
) -> TimeSlicing:
    """NVIDIA's ReplicatedResources: resources must be listed, even for ``{}`` or null."""
    if value is not None and not isinstance(value, Mapping):
        raise r.fail(where, f"expected a mapping with resources, got {plain_kind(value)}")
    section = r.struct(value, where, known, fold=False)
    rename_by_default = bool(r.boolean(section.get("renameByDefault"), f"{where}.renameByDefault"))
    fail_over_one = r.boolean(
        section.get("failRequestsGreaterThanOne"), f"{where}.failRequestsGreaterThanOne"
    )
    raw = section.get("resources")
    if raw is not None and not isinstance(raw, list):
        raise r.fail(f"{where}.resources", f"expected a list, got {plain_kind(raw)}")
    if not raw:
        raise r.fail(
            f"{where}.resources" if "resources" in section else where,
            "no resources specified: list at least one resource to share "
            "(NVIDIA's plugin refuses this too; delete the section to share nothing)",
        )
    resources = tuple(
        _parse_replica(r, item, f"{where}.resources[{i}]", rename_by_default)
        for i, item in enumerate(raw)
    )
    _check_renames(r, resources)
    _say_what_nvidia_ignores(r, resources, rename_by_default)
    return TimeSlicing(
        rename_by_default=rename_by_default,
        # NVIDIA keeps its historical MPS behaviour unless the file relaxes it (config.go).
        fail_requests_greater_than_one=mps if fail_over_one is None else fail_over_one,
        resources=resources,
    )


def _parse_replica(
    r: GoReader, item: object, where: str, rename_by_default: bool
) -> ReplicatedResource:
    if not isinstance(item, Mapping):
        raise r.fail(where, f"expected a mapping with name and replicas, got {plain_kind(item)}")
    data = r.struct(item, where, _REPLICA, fold=False)
    if "name" not in data:
        raise r.fail(f"{where}.name", "no resource name specified (e.g. nvidia.com/gpu)")
    name = r.resource(data["name"], f"{where}.name")
    devices = _parse_devices(r, data.get("devices", "all"), f"{where}.devices")
    if "replicas" not in data:
        raise r.fail(f"{where}.replicas", "no replicas specified")
    replicas = r.integer(data["replicas"], f"{where}.replicas") or 0
    if replicas < 2:
        raise r.fail(f"{where}.replicas", f"the number of replicas must be >= 2, got {replicas}")
    if replicas > MAX_REPLICAS:
        raise r.fail(f"{where}.replicas", f"at most {MAX_REPLICAS}, got {replicas}")
    if "rename" in data:
        rename = r.resource(data["rename"], f"{where}.rename")
    else:
        rename = f"{name}.shared" if rename_by_default else name
    return ReplicatedResource(name, rename, devices, replicas, where)


def _parse_devices(r: GoReader, value: object, where: str) -> ReplicaDevices:
    """NVIDIA's ReplicatedDevices: ``all``, a count > 0, or GPU/MIG indices and UUIDs."""
    if isinstance(value, str):
        if value != "all":
            raise r.fail(where, f"the only string accepted is 'all', got {value!r}")
        return ReplicaDevices(all=True)
    if value is None:
        raise r.fail(where, "expected 'all', a count or a list of devices, got nothing (null)")
    if isinstance(value, int | float) and not isinstance(value, bool):
        count = r.integer(value, where) or 0
        if count <= 0:
            raise r.fail(where, f"a device count must be > 0, got {count}")
        return ReplicaDevices(count=count)
    if not isinstance(value, list):
        raise r.fail(
            where, f"expected 'all', a count or a list of devices, got {plain_kind(value)}"
        )
    return ReplicaDevices(
        refs=tuple(_device_ref(r, item, f"{where}[{i}]") for i, item in enumerate(value))
    )


def _device_ref(r: GoReader, item: object, where: str) -> str:
    if isinstance(item, int | float) and not isinstance(item, bool):
        index = r.integer(item, where)
        if index is not None and index >= 0:
            return str(index)
    elif isinstance(item, str):
        if is_uint(item):
            return str(int(item))
        if is_mig_index(item):
            return ":".join(str(int(p)) for p in item.split(":"))
        if is_gpu_uuid(item) or is_mig_uuid(item):
            return item
    raise r.fail(where, f"{item!r} is not a GPU index, a MIG index (0:1) or a GPU or MIG UUID")


def _check_renames(r: GoReader, resources: Sequence[ReplicatedResource]) -> None:
    # Entries sharing one name may split its devices; they must then agree on the new name.
    by_name: dict[str, ReplicatedResource] = {}
    for res in resources:
        first = by_name.setdefault(res.name, res)
        if first.rename != res.rename:
            raise r.fail(
                f"{res.where}.rename",
                f"{res.name} is renamed to {first.rename!r} in {first.where}; "
                "all entries for one resource must use the same name",
            )
        if res is not first and (res.devices.all or first.devices.all):
            raise r.fail(
                f"{res.where}.devices",
                f"{res.name} already shares all devices in {first.where}; "
                "split the devices into lists to give GPUs different replica counts",
            )


def _check_mps_entries(r: GoReader, time_slicing: TimeSlicing, mps: TimeSlicing) -> None:
    """What MPS adds: its client limit, and no GPU both time-sliced and MPS-shared.

    NVIDIA's plugin, given both sections, silently ignores ``timeSlicing``
    (``Sharing.SharingStrategy``); here a GPU may be time-sliced while another is
    MPS-shared, so a resource both sections share wholly is refused (the exact
    device overlap of lists and counts is refused once devices are known).
    """
    sliced = {res.name: res for res in time_slicing.resources}
    renamed = {res.rename: res for res in time_slicing.resources}
    for res in mps.resources:
        if res.replicas > MPS_MAX_CLIENTS:
            raise r.fail(
                f"{res.where}.replicas",
                f"an MPS server serves at most {MPS_MAX_CLIENTS} clients per GPU, got "
                f"{res.replicas} (NVIDIA's mps-control-daemon refuses this too)",
            )
        other = sliced.get(res.name)
        if other is not None and (res.devices.all or other.devices.all):
            raise r.fail(
                f"{res.where}.devices",
                f"{res.name} is time-sliced in {other.where}: a GPU is either time-sliced or "
                "MPS-shared; list disjoint devices in each section",
            )
        if res.rename in renamed:
            raise r.fail(
                f"{res.where}.rename",
                f"{res.rename} already holds the time-sliced replicas of "
                f"{renamed[res.rename].where}; MPS replicas need a resource of their own",
            )


def _say_what_nvidia_ignores(
    r: GoReader, resources: Sequence[ReplicatedResource], rename_by_default: bool
) -> None:
    """NVIDIA's DisableResourceNamingInConfig: its plugin resets rename and devices."""
    for res in resources:
        nvidia_name = f"{res.name}.shared" if rename_by_default else res.name
        if res.rename != nvidia_name:
            r.warn(
                f"{res.where}.rename",
                f"honoured here ({res.rename}); NVIDIA's plugin ignores rename and would "
                f"advertise {nvidia_name}",
            )
        if not res.devices.all:
            r.warn(
                f"{res.where}.devices",
                "honoured here; NVIDIA's plugin ignores devices and would share every "
                f"{res.name} device",
            )
            if not res.devices.count and not res.devices.refs:
                r.warn(f"{res.where}.devices", "lists no device: this entry shares nothing")


def load_config_file(path: Path, *, strict: bool = False) -> FileConfig:
    from accel_plugins import yamlfile  # PyYAML only when there is a file: not on --simulate alone

    return parse_config(yamlfile.load(path, "config file"), str(path), strict=strict)


def _choice(value: str, choices: Sequence[str]) -> str | None:
    """The reason ``value`` is refused, or None."""
    return None if value in choices else f"{value!r} is not one of {', '.join(choices)}"


def resolve(
    overrides: Overrides,
    file: FileConfig | None = None,
    environ: Mapping[str, str] | None = None,
) -> NvidiaSettings:
    """Merge flag/env values over the file over the defaults, then check what NVIDIA checks."""
    f = file or FileConfig(source="")
    env = environ or {}

    def merged(flag: object, from_file: object, default: object) -> object:
        if flag is not None:
            return flag
        return from_file if from_file is not None else default

    def checked(flag: str | None, from_file: str | None, where: str, choices: Sequence[str]) -> str:
        """A choice from the flag (argparse checked it) or the file (checked here), or ""."""
        if flag is not None:
            return flag
        if from_file is None:
            return ""
        problem = _choice(from_file, choices)
        if problem:
            raise ConfigError(f.source, where, problem)
        return from_file

    recovery = overrides.health_recovery_seconds
    recovery = DEFAULT_RECOVERY_SECONDS if recovery is None else recovery
    if recovery < 0:
        raise ConfigError("--health-recovery-seconds", "", f"must be >= 0, got {recovery}")
    mig = checked(overrides.mig_strategy, f.mig_strategy, "flags.migStrategy", MIG_STRATEGIES)
    mig = mig or "none"
    id_strategy = checked(
        overrides.device_id_strategy,
        f.device_id_strategy,
        "flags.plugin.deviceIDStrategy",
        DEVICE_ID_STRATEGIES,
    )
    discovery = checked(
        overrides.device_discovery_strategy,
        f.device_discovery_strategy,
        "flags.deviceDiscoveryStrategy",
        DEVICE_DISCOVERY_STRATEGIES,
    )
    strategies = _strategies(overrides, f)
    policy = _replica_policy(overrides, f)
    driver_root = str(merged(overrides.nvidia_driver_root, f.nvidia_driver_root, "/")) or "/"
    # NVIDIA: a dev root that is not set (or empty) is the driver root (config.go).
    dev_root = str(merged(overrides.nvidia_dev_root, f.nvidia_dev_root, "")) or driver_root
    imex, imex_source = _imex(overrides, f)
    mps_root = str(merged(overrides.mps_root, f.mps_root, ""))
    _check_mps(f, mig, mps_root)
    gdrcopy = bool(merged(overrides.gdrcopy_enabled, f.gdrcopy_enabled, False))
    gds = bool(merged(overrides.gds_enabled, f.gds_enabled, False))
    mofed = bool(merged(overrides.mofed_enabled, f.mofed_enabled, False))
    prefix = merged(overrides.cdi_annotation_prefix, f.cdi_annotation_prefix, None)
    return NvidiaSettings(
        mig_strategy=mig,
        fail_on_init_error=bool(merged(overrides.fail_on_init_error, f.fail_on_init_error, True)),
        driver_root=Path(driver_root),
        dev_root=Path(dev_root),
        allocate=AllocateSettings(
            device_list_strategies=strategies,
            device_id_strategy=id_strategy or "uuid",
            pass_device_specs=bool(merged(overrides.pass_device_specs, f.pass_device_specs, False)),
            dev_root=Path(dev_root),
            cdi_annotation_prefix=str(prefix) if prefix else DEFAULT_CDI_ANNOTATION_PREFIX,
            gdrcopy_enabled=gdrcopy,
            gds_enabled=gds,
            mofed_enabled=mofed,
        ),
        time_slicing=f.time_slicing,
        mps=f.mps,
        mps_root=mps_root,
        replica_policy=policy,
        device_discovery_strategy=discovery or "auto",
        nvidia_ctk_path=str(
            merged(overrides.nvidia_ctk_path, f.nvidia_ctk_path, DEFAULT_NVIDIA_CTK_PATH)
        ),
        container_driver_root=str(
            merged(
                overrides.container_driver_root,
                f.container_driver_root,
                DEFAULT_CONTAINER_DRIVER_ROOT,
            )
        ),
        cdi_feature_flags=overrides.cdi_feature_flags or (),
        cdi_disable_hooks=overrides.cdi_disable_hooks or (),
        imex=imex,
        imex_source=imex_source,
        disable_healthchecks=env.get("DP_DISABLE_HEALTHCHECKS", ""),
        enable_healthchecks=env.get("DP_ENABLE_HEALTHCHECKS", ""),
        health_recovery_seconds=float(recovery),
        source=f.source or None,
    )


def _strategies(overrides: Overrides, f: FileConfig) -> tuple[str, ...]:
    if overrides.device_list_strategy is not None:
        return overrides.device_list_strategy
    if f.device_list_strategy is None:
        return ("envvar",)
    where = "flags.plugin.deviceListStrategy"
    _check_strategies(f.device_list_strategy, lambda reason: ConfigError(f.source, where, reason))
    strategies = tuple(dict.fromkeys(f.device_list_strategy))
    if not strategies:
        log.warning(
            "%s: %s: lists no strategy: containers get no device list (as with NVIDIA's plugin)",
            f.source,
            where,
        )
    return strategies


def _replica_policy(overrides: Overrides, f: FileConfig) -> str:
    """NVIDIA's sharedDevicesAllocationPolicy and our replicaPolicy alias, flag over file."""
    policy = overrides.replica_policy
    if overrides.shared_devices_allocation_policy is not None:
        named = POLICY_OF_SHARED[overrides.shared_devices_allocation_policy]
        if policy is not None and policy != named:
            raise ConfigError(
                "--replica-policy",
                "",
                f"{policy!r} contradicts --shared-devices-allocation-policy "
                f"{overrides.shared_devices_allocation_policy!r} (the same setting: "
                f"{SPREAD} is distributed)",
            )
        policy = named
    if policy is not None:
        return policy
    shared = f.shared_devices_allocation_policy
    if shared is None:
        return f.replica_policy or SPREAD
    where = "flags.plugin.sharedDevicesAllocationPolicy"
    problem = _choice(shared, SHARED_DEVICES_POLICIES)
    if problem:
        raise ConfigError(f.source, where, problem)
    named = POLICY_OF_SHARED[shared]
    if f.replica_policy is not None and f.replica_policy != named:
        raise ConfigError(
            f.source,
            "sharing.timeSlicing.replicaPolicy",
            f"{f.replica_policy!r} contradicts {where} {shared!r} "
            f"(the same setting: {SPREAD} is distributed)",
        )
    return named


def _imex(overrides: Overrides, f: FileConfig) -> tuple[Imex, tuple[str, str]]:
    if overrides.imex_channel_ids is not None:
        ids, source = overrides.imex_channel_ids, ("--imex-channel-ids", "")
    else:
        ids, source = f.imex_channel_ids or (), (f.source, "imex.channelIDs")
    if ids not in VALID_IMEX_CHANNEL_IDS:
        raise ConfigError(*source, f"channelIDs must be [] or [0]; found {list(ids)}")
    required = overrides.imex_required
    required = f.imex_required if required is None else required
    return Imex(channel_ids=ids, required=bool(required)), source


def _check_mps(f: FileConfig, mig: str, mps_root: str) -> None:
    """NVIDIA's validateFlags for MPS sharing (every MPS entry has >= 2 replicas)."""
    if f.mps is None:
        return
    if mig == "mixed":
        raise ConfigError(f.source, "sharing.mps", "MIG strategy mixed is not supported with MPS")
    if not mps_root:
        raise ConfigError(
            f.source, "sharing.mps", "MPS needs an MPS root: --mps-root, MPS_ROOT or flags.mpsRoot"
        )


def cdi_only_warnings(settings: NvidiaSettings) -> list[str]:
    """What a CDI device-list strategy leaves out that NVIDIA's plugin would name."""
    allocate = settings.allocate
    if not any(s in CDI_STRATEGIES for s in allocate.device_list_strategies):
        return []
    enabled = [
        name
        for name, on in (
            ("gdrcopy", allocate.gdrcopy_enabled),
            ("gds", allocate.gds_enabled),
            ("mofed", allocate.mofed_enabled),
        )
        if on
    ]
    if not enabled:
        return []
    return [
        f"{', '.join(enabled)} enabled with a CDI strategy: containers get the NVIDIA_* "
        "variables; NVIDIA's plugin also names its own CDI devices for them "
        "(k8s.device-plugin.nvidia.com/<mode>=all), whose specs this plugin does not write "
        "(it writes the gpu and imex-channel specs only)"
    ]
