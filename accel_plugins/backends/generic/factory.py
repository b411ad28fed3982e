"""What ``accel-plugins generic`` builds: settings from its options, and the backend factory.

Imported by :func:`accel_plugins.backends.generic.command.build` only when the
command runs (it pulls in pyudev and YAML).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.config import GenericConfig, load_config
from accel_plugins.backends.generic.eventsource import UdevSource
from accel_plugins.backends.generic.names import domain_problem
from accel_plugins.errors import ConfigError
from accel_plugins.flags import env_name
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.command import BackendFactory, InUse


def settings_from_options(options: Mapping[str, Any]) -> GenericSettings:
    """The backend's settings; ConfigError names the flag of a bad value."""
    problem = domain_problem(options["domain"])
    if problem:
        raise ConfigError("--domain", "", problem)
    for flag in ("--rescan-interval", "--vanished-grace"):
        value = options[flag[2:].replace("-", "_")]
        if not value > 0:
            raise ConfigError(flag, "", f"must be a positive number of seconds, got {value}")
    cdi_spec_dir = options["cdi_spec_dir"]
    return GenericSettings(
        domain=options["domain"],
        dev_root=Path(options["dev_root"]),
        sys_root=Path(options["sys_root"]),
        cdi_spec_dir=Path(cdi_spec_dir) if cdi_spec_dir else None,
        udev_source=UdevSource(options["udev_source"]),
        rescan_interval=options["rescan_interval"],
        vanished_grace=options["vanished_grace"],
    )


def backend_factory(options: Mapping[str, Any], in_use: InUse | None = None) -> BackendFactory:
    """Validate flags and config now; return what builds a backend (again on SIGHUP).

    Raises ConfigError for a missing or bad config file, so the command exits
    before touching the kubelet. Each later call re-reads the file. ``in_use``
    tells the backend which devices pods hold (the kubelet's PodResources API).
    """
    if not options.get("config"):
        raise ConfigError(
            "--config", "", f"required: the devices to expose (or set {env_name('--config')})"
        )
    path = Path(options["config"])
    settings = settings_from_options(options)
    first: list[GenericConfig] = [load_config(path)]

    def factory() -> Backend:
        config = first.pop() if first else load_config(path)
        return GenericBackend(config, settings, in_use=in_use)

    return factory
