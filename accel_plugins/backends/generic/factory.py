"""What ``accel-plugins generic`` builds: settings from its options, and the backend factory.

Imported by :func:`accel_plugins.backends.generic.command.build` only when the
command runs (it pulls in pyudev and YAML).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.command import SQUAT_DOMAIN
from accel_plugins.backends.generic.config import (
    DEVICE_FLAG,
    GenericConfig,
    load_config,
    parse_device_flags,
)
from accel_plugins.backends.generic.eventsource import UdevSource
from accel_plugins.backends.generic.names import DEFAULT_DOMAIN, domain_problem
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.command import InUse, RefreshInUse
from accel_plugins.util.flags import env_name

log = logging.getLogger(__name__)


def settings_from_options(options: Mapping[str, Any]) -> GenericSettings:
    """The backend's settings; ConfigError names the flag of a bad value.

    Without ``--domain`` the domain is the default here; :func:`backend_factory`
    puts the config file's (or squat's, with ``--device``) in its place.
    """
    domain = options.get("domain")
    if domain is not None:
        problem = domain_problem(domain)
        if problem:
            raise ConfigError("--domain", "", problem)
    for flag in ("--rescan-interval", "--vanished-grace"):
        value = options[flag[2:].replace("-", "_")]
        if not value > 0:
            raise ConfigError(flag, "", f"must be a positive number of seconds, got {value}")
    cdi_spec_dir = options["cdi_spec_dir"]
    return GenericSettings(
        domain=DEFAULT_DOMAIN if domain is None else domain,
        dev_root=Path(options["dev_root"]),
        sys_root=Path(options["sys_root"]),
        cdi_spec_dir=Path(cdi_spec_dir) if cdi_spec_dir else None,
        udev_source=UdevSource(options["udev_source"]),
        rescan_interval=options["rescan_interval"],
        vanished_grace=options["vanished_grace"],
    )


def backend_factory(
    options: Mapping[str, Any],
    in_use: InUse | None = None,
    refresh_in_use: RefreshInUse | None = None,
) -> Callable[[], GenericBackend]:
    """Validate flags and config now; return what builds a backend (again on SIGHUP).

    Raises ConfigError for a missing or bad config file or ``--device`` value, so
    the command exits before touching the kubelet. Each later call re-reads the
    file. ``in_use`` tells the backend which devices pods hold (the kubelet's
    PodResources API), ``refresh_in_use`` asks it again.

    squat's precedence (viper, config.go): ``--device`` values replace the file's
    devices; ``--domain`` (or its env twin) wins over the file's ``domain``.
    """
    flagged = parse_device_flags(options.get("device") or ())
    path = Path(options["config"]) if options.get("config") else None
    if path is None and not flagged:
        raise ConfigError(
            "--config",
            "",
            f"required unless {DEVICE_FLAG} gives the devices (or set {env_name('--config')})",
        )
    settings = settings_from_options(options)
    chosen = options.get("domain")
    # squat's default domain comes with squat's way of naming devices.
    fallback = SQUAT_DOMAIN if flagged else DEFAULT_DOMAIN

    def load() -> GenericConfig:
        if path is None:
            return GenericConfig(flagged, DEVICE_FLAG)
        config = load_config(path, devices_required=not flagged)
        if not flagged:
            return config
        if config.devices:
            log.warning(
                "%s: its %d device(s) are not used: %s flags replace them (as in squat's plugin)",
                path,
                len(config.devices),
                DEVICE_FLAG,
            )
        return replace(config, devices=flagged)

    first: list[GenericConfig] = [load()]

    def factory() -> GenericBackend:
        config = first.pop() if first else load()
        domain = chosen if chosen is not None else config.domain or fallback
        return GenericBackend(
            config,
            replace(settings, domain=domain),
            in_use=in_use,
            refresh_in_use=refresh_in_use,
        )

    return factory


def check_config(factory: Callable[[], GenericBackend]) -> int:
    """``--check-config``: print what each entry matches here; the exit status."""
    from accel_plugins.backends.generic.matches import exit_status, report

    backend = factory()
    entries = backend.matches()
    resources = {spec.name: backend.resource(spec.name) for spec in backend.config.devices}
    sys.stdout.write(report(backend.config, entries, resources))
    return exit_status(entries)
