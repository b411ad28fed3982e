"""NVIDIA's plugin config file (format v1), and how it merges with flags and env.

Accepted as NVIDIA's plugin writes it::

    version: v1
    flags:
      migStrategy: none | single | mixed
      failOnInitError: true
      nvidiaDriverRoot: /
      plugin:
        passDeviceSpecs: false
        deviceListStrategy: envvar          # or a list: [envvar, cdi-annotations]
        deviceIDStrategy: uuid | index
        cdiAnnotationPrefix: cdi.k8s.io/
        sharedDevicesAllocationPolicy: distributed | packed
    sharing:
      timeSlicing:
        renameByDefault: false
        failRequestsGreaterThanOne: false
        replicaPolicy: spread               # ours: spread | packed, an alias (see below)
        resources:
          - name: nvidia.com/gpu            # or nvidia.com/mig-<profile>; "gpu" alone works too
            replicas: 4
            rename: nvidia.com/gpu.shared   # optional
            devices: all                    # or a count, or [0, "1", "0:1", GPU-..., MIG-...]

Our addition (NVIDIA's users ask for it in their #1786): the same ``name``
may appear in several entries whose ``devices`` do not overlap, each with its
own ``replicas``, which gives every GPU its own replica count.

How a request's time-sliced replicas are picked is NVIDIA's
``sharedDevicesAllocationPolicy`` (flag ``--shared-devices-allocation-policy``,
env ``SHARED_DEVICES_ALLOCATION_POLICY``): ``distributed`` over distinct
physical GPUs (default) or ``packed`` onto one GPU first (see
``replica_policy.py``; MIG devices are always packed here). Our older names
stay as aliases: ``sharing.timeSlicing.replicaPolicy`` and ``--replica-policy``
with ``spread`` (= ``distributed``) or ``packed``; two names that disagree are
an error. NVIDIA's plugin ignores fields it does not know, so the file stays
readable by it.

Fields NVIDIA defines for other components (``gfd``, ``resources``, ``imex``,
``gdsEnabled``, ...) are accepted and ignored; anything else is an error,
so a typo never silently falls back to a default. Precedence is flag > env
> file > built-in default. Every error names the file, the field path and
the reason.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from accel_plugins import yamlfile
from accel_plugins.backends.nvidia.container_contract import (
    DEFAULT_CDI_ANNOTATION_PREFIX,
    DEVICE_ID_STRATEGIES,
    DEVICE_LIST_STRATEGIES,
    AllocateSettings,
)
from accel_plugins.backends.nvidia.replica_policy import PACKED, POLICIES, SPREAD
from accel_plugins.configfields import Fields
from accel_plugins.errors import ConfigError

log = logging.getLogger(__name__)

MIG_STRATEGIES = ("none", "single", "mixed")
REPLICA_POLICIES = POLICIES
# NVIDIA's sharedDevicesAllocationPolicy values, and the replica policy each one names.
SHARED_DEVICES_POLICIES = ("distributed", "packed")
POLICY_OF_SHARED: dict[str, str] = {"distributed": SPREAD, "packed": PACKED}
VERSION = "v1"
DEFAULT_RECOVERY_SECONDS = 60.0
# A million replicas took half a minute to build and could never reach the kubelet
# (4 MiB ListAndWatch limit, ~70,000 devices); refuse absurd counts up front.
MAX_REPLICAS = 10_000
_RESOURCE = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*/[A-Za-z0-9][-A-Za-z0-9_.]*$")
_SHAREABLE = re.compile(r"^nvidia\.com/(gpu|mig-[A-Za-z0-9.+]+)$")
_GPU_INDEX = re.compile(r"^\d+$")
_MIG_INDEX = re.compile(r"^\d+:\d+$")
_HEX = "[0-9a-fA-F]"
_UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_GPU_UUID = re.compile(f"^GPU-{_UUID}$")
_MIG_UUID = re.compile(f"^MIG-({_UUID}|GPU-{_UUID}/\\d+/\\d+)$")

_TOP = {"version", "flags", "sharing", "resources", "imex", "health"}
_FLAGS = {
    "migStrategy",
    "failOnInitError",
    "nvidiaDriverRoot",
    "plugin",
    "gfd",
    "gdsEnabled",
    "mofedEnabled",
    "nvidiaDevRoot",
    "useNodeFeatureAPI",
    "deviceDiscoveryStrategy",
    "restartOnDeviceUnhealthy",
}
_PLUGIN = {
    "sharedDevicesAllocationPolicy",
    "passDeviceSpecs",
    "deviceListStrategy",
    "deviceIDStrategy",
    "cdiAnnotationPrefix",
    "nvidiaCTKPath",
    "containerDriverRoot",
    "mpsRoot",
}
_SHARING = {"timeSlicing", "mps"}
_TIME_SLICING = {"renameByDefault", "failRequestsGreaterThanOne", "replicaPolicy", "resources"}
_REPLICA = {"name", "rename", "devices", "replicas"}


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
class FileConfig:
    """What a config file sets; None means "not set here"."""

    source: str
    mig_strategy: str | None = None
    fail_on_init_error: bool | None = None
    nvidia_driver_root: str | None = None
    pass_device_specs: bool | None = None
    device_list_strategy: tuple[str, ...] | None = None
    device_id_strategy: str | None = None
    cdi_annotation_prefix: str | None = None
    time_slicing: TimeSlicing = field(default_factory=TimeSlicing)
    replica_policy: str | None = None


@dataclass(frozen=True, slots=True)
class Overrides:
    """Values from flags or their environment twins; None means "not given"."""

    mig_strategy: str | None = None
    fail_on_init_error: bool | None = None
    nvidia_driver_root: str | None = None
    pass_device_specs: bool | None = None
    device_list_strategy: tuple[str, ...] | None = None
    device_id_strategy: str | None = None
    health_recovery_seconds: float | None = None
    replica_policy: str | None = None
    shared_devices_allocation_policy: str | None = None


@dataclass(frozen=True, slots=True)
class NvidiaSettings:
    """The resolved configuration the backend runs with."""

    mig_strategy: str = "none"
    fail_on_init_error: bool = True
    driver_root: Path = Path("/")
    allocate: AllocateSettings = field(default_factory=AllocateSettings)
    time_slicing: TimeSlicing = field(default_factory=TimeSlicing)
    replica_policy: str = SPREAD
    """How GetPreferredAllocation picks time-sliced replicas: spread or packed."""
    disable_healthchecks: str = ""
    enable_healthchecks: str = ""
    health_recovery_seconds: float = DEFAULT_RECOVERY_SECONDS
    source: str | None = None


def parse_device_list_strategy(text: str) -> tuple[str, ...]:
    """``envvar,cdi-annotations`` -> a validated tuple (flag and env form)."""
    items = tuple(part.strip() for part in text.split(",") if part.strip())
    _check_strategies(items, ValueError)
    return items


def _check_strategies(items: Sequence[str], make: Callable[[str], Exception]) -> None:
    if not items:
        raise make("at least one device-list strategy is needed")
    for item in items:
        if item not in DEVICE_LIST_STRATEGIES:
            raise make(f"unknown strategy {item!r} (known: {', '.join(DEVICE_LIST_STRATEGIES)})")
    if len(set(items)) != len(items):
        raise make(f"a strategy is repeated in {', '.join(items)}")


def parse_config(data: object, source: str) -> FileConfig:
    """Validate a decoded config document."""
    r = Fields(source)
    if data is None:
        raise r.fail("", "the file is empty; a config needs at least 'version: v1'")
    top = r.mapping(data, "", _TOP)
    version = top.get("version", VERSION)
    if version != VERSION:
        raise r.fail("version", f"unknown version {version!r}; this plugin reads {VERSION!r}")
    flags = r.mapping(top.get("flags"), "flags", _FLAGS, optional=True)
    for ignored in ("gdsEnabled", "mofedEnabled"):
        if flags.get(ignored):
            log.warning("%s: flags.%s is not supported and is ignored", source, ignored)
    plugin = r.mapping(flags.get("plugin"), "flags.plugin", _PLUGIN, optional=True)
    strategies = plugin.get("deviceListStrategy")
    device_list: tuple[str, ...] | None = None
    if strategies is not None:
        where = "flags.plugin.deviceListStrategy"
        items = [strategies] if isinstance(strategies, str) else strategies
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise r.fail(where, f"expected a strategy or a list of them, got {strategies!r}")
        _check_strategies(items, lambda reason: r.fail(where, reason))
        device_list = tuple(items)
    time_slicing, replica_policy = _parse_sharing(r, top.get("sharing"))
    shared = r.optional(
        plugin, "sharedDevicesAllocationPolicy", "flags.plugin", r.choice, SHARED_DEVICES_POLICIES
    )
    if shared is not None:
        named = POLICY_OF_SHARED[shared]
        if replica_policy is not None and replica_policy != named:
            raise r.fail(
                "sharing.timeSlicing.replicaPolicy",
                f"{replica_policy!r} contradicts flags.plugin.sharedDevicesAllocationPolicy "
                f"{shared!r} (the same setting: {SPREAD} is distributed)",
            )
        replica_policy = named
    return FileConfig(
        source=source,
        mig_strategy=r.optional(flags, "migStrategy", "flags", r.choice, MIG_STRATEGIES),
        fail_on_init_error=r.optional(flags, "failOnInitError", "flags", r.boolean),
        nvidia_driver_root=r.optional(flags, "nvidiaDriverRoot", "flags", r.string, empty=False),
        pass_device_specs=r.optional(plugin, "passDeviceSpecs", "flags.plugin", r.boolean),
        device_list_strategy=device_list,
        device_id_strategy=r.optional(
            plugin, "deviceIDStrategy", "flags.plugin", r.choice, DEVICE_ID_STRATEGIES
        ),
        cdi_annotation_prefix=r.optional(
            plugin, "cdiAnnotationPrefix", "flags.plugin", r.string, empty=False
        ),
        time_slicing=time_slicing,
        replica_policy=replica_policy,
    )


def _parse_sharing(r: Fields, value: object) -> tuple[TimeSlicing, str | None]:
    sharing = r.mapping(value, "sharing", _SHARING, optional=True)
    mps = r.mapping(sharing.get("mps"), "sharing.mps", optional=True)
    if mps.get("resources"):
        raise r.fail("sharing.mps", "MPS sharing is not supported; use sharing.timeSlicing")
    where = "sharing.timeSlicing"
    ts = r.mapping(sharing.get("timeSlicing"), where, _TIME_SLICING, optional=True)
    if not ts:
        return TimeSlicing(), None
    replica_policy = r.optional(ts, "replicaPolicy", where, r.choice, REPLICA_POLICIES)
    rename_by_default = bool(r.optional(ts, "renameByDefault", where, r.boolean))
    raw = ts.get("resources")
    if not isinstance(raw, list) or not raw:
        raise r.fail(f"{where}.resources", "list at least one resource to share")
    resources = tuple(
        _parse_replica(r, item, f"{where}.resources[{i}]", rename_by_default)
        for i, item in enumerate(raw)
    )
    _check_renames(r, resources)
    fail_over_one = r.optional(ts, "failRequestsGreaterThanOne", where, r.boolean)
    sharing_config = TimeSlicing(
        rename_by_default=rename_by_default,
        fail_requests_greater_than_one=bool(fail_over_one),
        resources=resources,
    )
    return sharing_config, replica_policy


def qualify(name: str) -> str:
    """NVIDIA accepts short names: ``gpu`` means ``nvidia.com/gpu``."""
    return name if "/" in name else f"nvidia.com/{name}"


def _parse_replica(
    r: Fields, item: object, where: str, rename_by_default: bool
) -> ReplicatedResource:
    data = r.mapping(item, where, _REPLICA, optional=True)
    raw_name = r.optional(data, "name", where, r.string, empty=False)
    if raw_name is None:
        raise r.fail(f"{where}.name", "name the resource to share, e.g. nvidia.com/gpu")
    name = qualify(raw_name)
    if not _SHAREABLE.match(name):
        raise r.fail(
            f"{where}.name", f"{raw_name!r} is not nvidia.com/gpu or nvidia.com/mig-<profile>"
        )
    replicas = data.get("replicas")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise r.fail(f"{where}.replicas", f"expected an integer >= 1, got {replicas!r}")
    if replicas > MAX_REPLICAS:
        raise r.fail(f"{where}.replicas", f"at most {MAX_REPLICAS}, got {replicas}")
    rename_raw = r.optional(data, "rename", where, r.string, empty=False)
    rename = (
        qualify(rename_raw) if rename_raw else (f"{name}.shared" if rename_by_default else name)
    )
    if not _RESOURCE.match(rename):
        raise r.fail(f"{where}.rename", f"{rename_raw!r} is not a valid resource name")
    return ReplicatedResource(
        name=name,
        rename=rename,
        devices=_parse_devices(r, data.get("devices", "all"), f"{where}.devices"),
        replicas=replicas,
        where=where,
    )


def _parse_devices(r: Fields, value: object, where: str) -> ReplicaDevices:
    if isinstance(value, str):
        if value != "all":
            raise r.fail(where, f"the only string accepted is 'all', got {value!r}")
        return ReplicaDevices(all=True)
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise r.fail(where, f"a device count must be >= 1, got {value}")
        return ReplicaDevices(count=value)
    if not isinstance(value, list) or not value:
        raise r.fail(where, f"expected 'all', a count or a list of devices, got {value!r}")
    refs: list[str] = []
    for i, item in enumerate(value):
        ref = str(item) if isinstance(item, int) and not isinstance(item, bool) else item
        if not isinstance(ref, str) or not any(
            p.match(ref) for p in (_GPU_INDEX, _MIG_INDEX, _GPU_UUID, _MIG_UUID)
        ):
            raise r.fail(
                f"{where}[{i}]", f"{item!r} is not a GPU index, a MIG index (0:1) or a UUID"
            )
        refs.append(ref)
    return ReplicaDevices(refs=tuple(refs))


def _check_renames(r: Fields, resources: Sequence[ReplicatedResource]) -> None:
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


def load_config_file(path: Path) -> FileConfig:
    return parse_config(yamlfile.load(path, "config file"), str(path))


def resolve(
    overrides: Overrides,
    file: FileConfig | None = None,
    environ: Mapping[str, str] | None = None,
) -> NvidiaSettings:
    """Merge flag/env values over the file over the defaults."""
    f = file or FileConfig(source="")
    env = environ or {}

    def pick(flag: object, from_file: object, default: object) -> object:
        if flag is not None:
            return flag
        return from_file if from_file is not None else default

    recovery = pick(overrides.health_recovery_seconds, None, DEFAULT_RECOVERY_SECONDS)
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
    assert isinstance(recovery, float | int)
    if recovery < 0:
        raise ConfigError("--health-recovery-seconds", "", f"must be >= 0, got {recovery}")
    root = Path(str(pick(overrides.nvidia_driver_root, f.nvidia_driver_root, "/")))
    strategies = pick(overrides.device_list_strategy, f.device_list_strategy, ("envvar",))
    assert isinstance(strategies, tuple)
    return NvidiaSettings(
        mig_strategy=str(pick(overrides.mig_strategy, f.mig_strategy, "none")),
        fail_on_init_error=bool(pick(overrides.fail_on_init_error, f.fail_on_init_error, True)),
        driver_root=root,
        allocate=AllocateSettings(
            device_list_strategies=strategies,
            device_id_strategy=str(
                pick(overrides.device_id_strategy, f.device_id_strategy, "uuid")
            ),
            pass_device_specs=bool(pick(overrides.pass_device_specs, f.pass_device_specs, False)),
            driver_root=root,
            cdi_annotation_prefix=f.cdi_annotation_prefix or DEFAULT_CDI_ANNOTATION_PREFIX,
        ),
        time_slicing=f.time_slicing,
        replica_policy=str(pick(policy, f.replica_policy, SPREAD)),
        disable_healthchecks=env.get("DP_DISABLE_HEALTHCHECKS", ""),
        enable_healthchecks=env.get("DP_ENABLE_HEALTHCHECKS", ""),
        health_recovery_seconds=float(recovery),
        source=f.source or None,
    )
