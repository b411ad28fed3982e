"""``accel-plugins nvidia``: flags (with NVIDIA's env names) and the backend factory."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from accel_plugins.backends.nvidia.allocate import DEVICE_ID_STRATEGIES, generated_mig_minors
from accel_plugins.backends.nvidia.backend import create_backend
from accel_plugins.backends.nvidia.config import (
    DEFAULT_RECOVERY_SECONDS,
    MIG_STRATEGIES,
    REPLICA_POLICIES,
    NvidiaSettings,
    Overrides,
    load_config_file,
    parse_device_list_strategy,
    resolve,
)
from accel_plugins.backends.nvidia.nvml import Pynvml
from accel_plugins.backends.nvidia.profile import NodeProfile
from accel_plugins.backends.nvidia.profiles import load_profile, names
from accel_plugins.backends.nvidia.simulate import SimulatedNvml
from accel_plugins.flags import add_flag, parse_bool
from accel_plugins.plugin.backend import Backend


def _device_list(text: str) -> tuple[str, ...]:
    try:
        return parse_device_list_strategy(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The NVIDIA plugin's flags; unset ones are None so the config file can fill them."""
    add_flag(
        parser,
        "--config",
        default=None,
        env=["CONFIG_FILE"],
        metavar="FILE",
        help="NVIDIA device plugin config file (format v1); flags and env win over it",
    )
    add_flag(
        parser,
        "--simulate",
        default=None,
        metavar="PROFILE_OR_FILE",
        help=f"serve a simulated node instead of NVML: {', '.join(names())}, or a YAML file",
    )
    add_flag(
        parser,
        "--mig-strategy",
        default=None,
        choices=MIG_STRATEGIES,
        env=["MIG_STRATEGY"],
        help="how MIG devices are offered (built-in default none)",
    )
    add_flag(
        parser,
        "--device-list-strategy",
        default=None,
        type=_device_list,
        env=["DEVICE_LIST_STRATEGY"],
        metavar="STRATEGY[,STRATEGY]",
        help="envvar, volume-mounts, cdi-annotations, cdi-cri, comma-separated (default envvar)",
    )
    add_flag(
        parser,
        "--device-id-strategy",
        default=None,
        choices=DEVICE_ID_STRATEGIES,
        env=["DEVICE_ID_STRATEGY"],
        help="name devices to the runtime by uuid or index (default uuid)",
    )
    add_flag(
        parser,
        "--pass-device-specs",
        default=None,
        type=parse_bool,
        env=["PASS_DEVICE_SPECS"],
        help="also hand the /dev/nvidia* nodes to the kubelet on Allocate (default false)",
    )
    add_flag(
        parser,
        "--fail-on-init-error",
        default=None,
        type=parse_bool,
        env=["FAIL_ON_INIT_ERROR"],
        help="exit 1 when NVML cannot start; false idles with no devices (default true)",
    )
    add_flag(
        parser,
        "--nvidia-driver-root",
        default=None,
        env=["NVIDIA_DRIVER_ROOT"],
        metavar="DIR",
        help="where the driver is installed, e.g. / or /run/nvidia/driver (default /)",
    )
    add_flag(
        parser,
        "--health-recovery-seconds",
        default=None,
        type=_seconds,
        metavar="SECONDS",
        help=f"quiet time before an Unhealthy GPU is probed and may recover; 0 never "
        f"(default {DEFAULT_RECOVERY_SECONDS:g})",
    )
    add_flag(
        parser,
        "--replica-policy",
        default=None,
        choices=REPLICA_POLICIES,
        help="how a request's time-sliced replicas are chosen: spread over distinct GPUs, or "
        "packed onto one GPU first (default spread; config sharing.timeSlicing.replicaPolicy)",
    )
    add_flag(
        parser,
        "--nvml-library",
        default=None,
        metavar="PATH",
        help="load this libnvidia-ml.so.1 instead of searching the system and driver root",
    )


def _overrides(args: argparse.Namespace) -> Overrides:
    return Overrides(
        mig_strategy=args.mig_strategy,
        fail_on_init_error=args.fail_on_init_error,
        nvidia_driver_root=args.nvidia_driver_root,
        pass_device_specs=args.pass_device_specs,
        device_list_strategy=args.device_list_strategy,
        device_id_strategy=args.device_id_strategy,
        health_recovery_seconds=args.health_recovery_seconds,
        replica_policy=args.replica_policy,
    )


def load_settings(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> NvidiaSettings:
    """Flags/env over the config file over defaults; ConfigError names file, field, reason."""
    env = os.environ if environ is None else environ
    file = load_config_file(Path(args.config)) if args.config else None
    return resolve(_overrides(args), file, env)


def simulated_backend(
    profile: str | NodeProfile, settings: NvidiaSettings | None = None
) -> Backend:
    """A backend over a simulated node (``demo``, previews); ``profile`` is a name or file."""
    node = load_profile(profile) if isinstance(profile, str) else profile
    return create_backend(
        SimulatedNvml(node),
        settings or NvidiaSettings(),
        mig_minors=generated_mig_minors(len(node.gpus)),
    )


def backend_factory(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> Callable[[], Backend]:
    """Validate now; the returned factory re-reads the config file each call (SIGHUP)."""
    load_settings(args, environ)
    profile: NodeProfile | None = load_profile(args.simulate) if args.simulate else None

    def factory() -> Backend:
        settings = load_settings(args, environ)
        if profile is not None:
            return simulated_backend(profile, settings)
        return create_backend(Pynvml(settings.driver_root, library=args.nvml_library), settings)

    return factory
