"""NVIDIA's plugin config file (format v1): read and checked as NVIDIA's plugin does.

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
merging flags (``validateFlags``) are made in :func:`.resolve.resolve`, so a flag can
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

from collections.abc import Mapping, Sequence
from pathlib import Path

from accel_plugins.backends.nvidia.allocation.replica_policy import POLICIES
from accel_plugins.backends.nvidia.config.config_syntax import (
    GoReader,
    is_gpu_uuid,
    is_mig_index,
    is_mig_uuid,
    is_uint,
)
from accel_plugins.backends.nvidia.config.settings import (
    MAX_REPLICAS,
    MPS_MAX_CLIENTS,
    REPLICA_POLICIES,
    VERSION,
    FileConfig,
    GfdFlags,
    ReplicaDevices,
    ReplicatedResource,
    ResourcePattern,
    TimeSlicing,
)
from accel_plugins.util.configfields import plain_kind

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
    from accel_plugins.util import (
        yamlfile,  # PyYAML only when there is a file: not on --simulate alone
    )

    return parse_config(yamlfile.load(path, "config file"), str(path), strict=strict)
