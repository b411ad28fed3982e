"""Flags over environment over the config file over defaults: the settings the backend runs with.

NVIDIA's plugin merges its flags (and their environment twins) over the file
and only then checks what depends on the merged values (``validateFlags``):
the strategies, the sharing policies, the IMEX channel IDs and MPS; so do we,
so a flag can override a bad file value as it can there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from accel_plugins.backends.nvidia.allocation.replica_policy import SPREAD
from accel_plugins.backends.nvidia.config.settings import (
    DEFAULT_CONTAINER_DRIVER_ROOT,
    DEFAULT_NVIDIA_CTK_PATH,
    DEFAULT_RECOVERY_SECONDS,
    DEVICE_DISCOVERY_STRATEGIES,
    MIG_STRATEGIES,
    POLICY_OF_SHARED,
    SHARED_DEVICES_POLICIES,
    VALID_IMEX_CHANNEL_IDS,
    FileConfig,
    Imex,
    NvidiaSettings,
    Overrides,
    check_strategies,
)
from accel_plugins.backends.nvidia.container_contract import (
    CDI_STRATEGIES,
    DEFAULT_CDI_ANNOTATION_PREFIX,
    DEVICE_ID_STRATEGIES,
    AllocateSettings,
)
from accel_plugins.errors import ConfigError

log = logging.getLogger(__name__)

# DRA mode leaves out the hooks the toolkit of NVIDIA's DRA driver (v1.19.1) does not know:
# the node's hook program may be that one, and an unknown hook fails the container.
DRA_DISABLED_HOOKS = ("update-application-profile",)


def _choice(value: str, choices: Sequence[str]) -> str | None:
    """The reason ``value`` is refused, or None."""
    return None if value in choices else f"{value!r} is not one of {', '.join(choices)}"


def resolve(
    overrides: Overrides,
    file: FileConfig | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    dra: bool = False,
) -> NvidiaSettings:
    """Merge flag/env values over the file over the defaults, then check what NVIDIA checks.

    ``dra``: the DRA mode's defaults, those of NVIDIA's DRA driver (issue 35). A claim's
    devices are self-contained CDI devices (device nodes, driver libraries and binaries,
    hooks, ``NVIDIA_VISIBLE_DEVICES=void``): device-list strategy ``cdi-cri``, not
    ``envvar``, whose answer only a runtime hook turns into a GPU; and no
    ``update-application-profile`` hook, which the toolkit NVIDIA's DRA driver ships
    (v1.19) does not have. A strategy or hook list set by flag or file wins.
    """
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
    strategies = _strategies(overrides, f, dra)
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
        cdi_disable_hooks=(
            overrides.cdi_disable_hooks
            if overrides.cdi_disable_hooks is not None
            else DRA_DISABLED_HOOKS
            if dra
            else ()
        ),
        imex=imex,
        imex_source=imex_source,
        disable_healthchecks=env.get("DP_DISABLE_HEALTHCHECKS", ""),
        enable_healthchecks=env.get("DP_ENABLE_HEALTHCHECKS", ""),
        health_recovery_seconds=float(recovery),
        source=f.source or None,
    )


def _strategies(overrides: Overrides, f: FileConfig, dra: bool) -> tuple[str, ...]:
    if overrides.device_list_strategy is not None:
        return overrides.device_list_strategy
    if f.device_list_strategy is None:
        return ("cdi-cri",) if dra else ("envvar",)
    where = "flags.plugin.deviceListStrategy"
    check_strategies(f.device_list_strategy, lambda reason: ConfigError(f.source, where, reason))
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
