"""What ``accel-plugins nvidia`` builds: settings from options and file, and the backend factory.

Imported by :func:`accel_plugins.backends.nvidia.command.build` only when the
command runs (it pulls in YAML and, for real GPUs, NVML).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel_plugins.backends.nvidia.backend import create_backend
from accel_plugins.backends.nvidia.config.resolve import cdi_only_warnings, resolve
from accel_plugins.backends.nvidia.config.settings import NvidiaSettings, Overrides
from accel_plugins.backends.nvidia.container_contract import (
    CDI_STRATEGIES,
    find_imex_channels,
    generated_mig_minors,
)
from accel_plugins.backends.nvidia.nvml import Pynvml
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.command import BackendFactory

if TYPE_CHECKING:  # the CDI writer and the simulated node load only when asked for
    from accel_plugins.backends.nvidia.cdi.cdi_spec import NvidiaCdi
    from accel_plugins.backends.nvidia.simulate.simulated_profile import NodeProfile

log = logging.getLogger(__name__)


def _overrides(options: Mapping[str, Any]) -> Overrides:
    return Overrides(
        mig_strategy=options.get("mig_strategy"),
        fail_on_init_error=options.get("fail_on_init_error"),
        mps_root=options.get("mps_root"),
        nvidia_driver_root=options.get("nvidia_driver_root"),
        nvidia_dev_root=options.get("nvidia_dev_root"),
        gdrcopy_enabled=options.get("gdrcopy_enabled"),
        gds_enabled=options.get("gds_enabled"),
        mofed_enabled=options.get("mofed_enabled"),
        device_discovery_strategy=options.get("device_discovery_strategy"),
        pass_device_specs=options.get("pass_device_specs"),
        device_list_strategy=options.get("device_list_strategy"),
        device_id_strategy=options.get("device_id_strategy"),
        cdi_annotation_prefix=options.get("cdi_annotation_prefix"),
        nvidia_ctk_path=options.get("nvidia_cdi_hook_path"),
        container_driver_root=options.get("driver_root_ctr_path"),
        imex_channel_ids=options.get("imex_channel_ids"),
        imex_required=options.get("imex_required"),
        cdi_feature_flags=options.get("cdi_feature_flags"),
        cdi_disable_hooks=options.get("cdi_disable_hooks"),
        health_recovery_seconds=options.get("health_recovery_seconds"),
        replica_policy=options.get("replica_policy"),
        shared_devices_allocation_policy=options.get("shared_devices_allocation_policy"),
    )


def load_settings(
    options: Mapping[str, Any], environ: Mapping[str, str], *, dra: bool = False
) -> NvidiaSettings:
    """Flags/env over the config file over defaults; ConfigError names file, field, reason.

    ``options`` are the command's option values by dest (None: not given);
    ``environ`` supplies the variables that have no flag (DP_DISABLE_HEALTHCHECKS...);
    ``dra`` picks the DRA mode's defaults (see :func:`resolve`).
    """
    config = options.get("config")
    strict = bool(options.get("strict_config"))
    file = None
    if config:  # the file's parser loads only for a file (issue 34)
        from accel_plugins.backends.nvidia.config.config_file import load_config_file

        file = load_config_file(Path(config), strict=strict)
    return resolve(_overrides(options), file, environ, dra=dra)


def runnable_settings(
    options: Mapping[str, Any], environ: Mapping[str, str], *, dra: bool = False
) -> NvidiaSettings:
    """:func:`load_settings`, refusing what this plugin cannot serve yet, with the IMEX
    channels found on the node (a required one that is missing is a ConfigError)."""
    settings = load_settings(options, environ, dra=dra)
    if settings.device_discovery_strategy == "tegra":
        raise ConfigError(
            "--device-discovery-strategy",
            "",
            "tegra is not supported: this plugin discovers GPUs through NVML (auto or nvml)",
        )
    for warning in cdi_only_warnings(settings):
        log.warning("%s", warning)
    channels = find_imex_channels(
        settings.imex.channel_ids,
        settings.dev_root,
        required=settings.imex.required,
        source=settings.imex_source,
    )
    allocate = dataclasses.replace(settings.allocate, imex_channels=channels)
    return dataclasses.replace(settings, allocate=allocate)


def cdi_writer(
    settings: NvidiaSettings, spec_dir: str | None, *, kept_after_exit: bool = False
) -> NvidiaCdi | None:
    """The CDI spec writer when a CDI device-list strategy is selected (else None);
    ``kept_after_exit`` in DRA mode (see NvidiaCdi)."""
    if not any(s in CDI_STRATEGIES for s in settings.allocate.device_list_strategies):
        return None
    from accel_plugins.backends.nvidia.cdi.cdi_spec import CdiOptions, NvidiaCdi
    from accel_plugins.plugin.cdi import DEFAULT_SPEC_DIR

    options = CdiOptions(
        spec_dir=Path(spec_dir) if spec_dir else DEFAULT_SPEC_DIR,
        hook_path=settings.nvidia_ctk_path,
        disabled_hooks=settings.cdi_disable_hooks,
        feature_flags=settings.cdi_feature_flags,
        device_id_strategy=settings.allocate.device_id_strategy,
    )
    return NvidiaCdi(
        options,
        driver_root=settings.driver_root,
        dev_root=settings.dev_root,
        imex_channels=settings.allocate.imex_channels,
        container_driver_root=Path(settings.container_driver_root),
        kept_after_exit=kept_after_exit,
    )


def simulated_backend(
    profile: str | NodeProfile,
    settings: NvidiaSettings | None = None,
    *,
    cdi_spec_dir: str | None = None,
    cdi_kept_after_exit: bool = False,
) -> Backend:
    """A backend over a simulated node (``demo``, previews); ``profile`` is a name or file."""
    from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
    from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml

    node = load_profile(profile) if isinstance(profile, str) else profile
    settings = settings or NvidiaSettings()
    return create_backend(
        SimulatedNvml(node),
        settings,
        mig_minors=generated_mig_minors(len(node.gpus)),
        cdi=cdi_writer(settings, cdi_spec_dir, kept_after_exit=cdi_kept_after_exit),
    )


def backend_factory(
    options: Mapping[str, Any], environ: Mapping[str, str], *, dra_cdi_dir: str | None = None
) -> BackendFactory:
    """Validate now; the returned factory re-reads the config file on later calls (SIGHUP).

    ``dra_cdi_dir`` (DRA mode: where its claim specs go) makes the DRA defaults apply: CDI
    devices that carry everything a container needs, written there unless
    ``--cdi-spec-dir`` says otherwise (see :func:`resolve`). Not for ``--simulate``: a
    simulated GPU has no device node and no driver files for a CDI device to name."""
    simulate = options.get("simulate")
    kept = dra_cdi_dir is not None  # DRA: specs outlive the plugin, as claim specs do
    dra_defaults = kept and not simulate
    first: list[NvidiaSettings] = [runnable_settings(options, environ, dra=dra_defaults)]
    profile: NodeProfile | None = None
    if simulate:
        from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile

        profile = load_profile(simulate)
    library = options.get("nvml_library")
    spec_dir = options.get("cdi_spec_dir") or dra_cdi_dir

    def factory() -> Backend:
        # The first build uses what was just validated (its warnings are logged once).
        settings = first.pop() if first else runnable_settings(options, environ, dra=dra_defaults)
        if profile is not None:
            return simulated_backend(
                profile, settings, cdi_spec_dir=spec_dir, cdi_kept_after_exit=kept
            )
        return create_backend(
            Pynvml(settings.driver_root, library=library),
            settings,
            cdi=cdi_writer(settings, spec_dir, kept_after_exit=kept),
        )

    features = options.get("nfd_features_file")
    if features:
        from accel_plugins.backends.nvidia.labels.feature_file import labelled

        return labelled(factory, Path(features))
    return factory
