"""What ``accel-plugins nvidia`` builds: settings from options and file, and the backend factory.

Imported by :func:`accel_plugins.backends.nvidia.command.build` only when the
command runs (it pulls in YAML and, for real GPUs, NVML).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel_plugins.backends.nvidia.backend import create_backend
from accel_plugins.backends.nvidia.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.config import (
    NvidiaSettings,
    Overrides,
    load_config_file,
    resolve,
)
from accel_plugins.backends.nvidia.container_contract import generated_mig_minors
from accel_plugins.backends.nvidia.nvml import Pynvml
from accel_plugins.backends.nvidia.simulate import SimulatedNvml
from accel_plugins.backends.nvidia.simulated_profile import NodeProfile
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.command import BackendFactory


def _overrides(options: Mapping[str, Any]) -> Overrides:
    return Overrides(
        mig_strategy=options.get("mig_strategy"),
        fail_on_init_error=options.get("fail_on_init_error"),
        nvidia_driver_root=options.get("nvidia_driver_root"),
        pass_device_specs=options.get("pass_device_specs"),
        device_list_strategy=options.get("device_list_strategy"),
        device_id_strategy=options.get("device_id_strategy"),
        health_recovery_seconds=options.get("health_recovery_seconds"),
        replica_policy=options.get("replica_policy"),
        shared_devices_allocation_policy=options.get("shared_devices_allocation_policy"),
    )


def load_settings(options: Mapping[str, Any], environ: Mapping[str, str]) -> NvidiaSettings:
    """Flags/env over the config file over defaults; ConfigError names file, field, reason.

    ``options`` are the command's option values by dest (None: not given);
    ``environ`` supplies the variables that have no flag (DP_DISABLE_HEALTHCHECKS...).
    """
    config = options.get("config")
    file = load_config_file(Path(config)) if config else None
    return resolve(_overrides(options), file, environ)


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


def backend_factory(options: Mapping[str, Any], environ: Mapping[str, str]) -> BackendFactory:
    """Validate now; the returned factory re-reads the config file each call (SIGHUP)."""
    load_settings(options, environ)
    simulate = options.get("simulate")
    profile: NodeProfile | None = load_profile(simulate) if simulate else None
    library = options.get("nvml_library")

    def factory() -> Backend:
        settings = load_settings(options, environ)
        if profile is not None:
            return simulated_backend(profile, settings)
        return create_backend(Pynvml(settings.driver_root, library=library), settings)

    return factory
