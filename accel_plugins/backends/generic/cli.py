"""Flags of ``accel-plugins generic`` and the backend factory the manager calls.

Every flag has an environment twin (``--dev-root`` / ``ACCEL_PLUGINS_DEV_ROOT``).
The default domain is ``accel-plugins.io``; pass ``--domain squat.ai`` to keep
the resource names of squat's generic-device-plugin when replacing it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from accel_plugins.backends.generic.backend import (
    DEFAULT_RESCAN_INTERVAL,
    GenericBackend,
    GenericSettings,
)
from accel_plugins.backends.generic.config import GenericConfig, load_config
from accel_plugins.backends.generic.health import DEFAULT_VANISHED_GRACE
from accel_plugins.backends.generic.monitor import UdevSource
from accel_plugins.backends.generic.names import DEFAULT_DOMAIN, domain_problem
from accel_plugins.errors import ConfigError
from accel_plugins.flags import add_flag, env_name
from accel_plugins.plugin.backend import Backend


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--config",
        default=None,
        metavar="FILE",
        help="YAML file listing the devices to expose (squat's format plus udev matchers); "
        "required",
    )
    add_flag(
        parser,
        "--domain",
        default=DEFAULT_DOMAIN,
        help="domain of the resource names (<domain>/<name>); squat's plugin uses squat.ai",
    )
    add_flag(
        parser,
        "--dev-root",
        default="/dev",
        metavar="DIR",
        help="where this process sees the host's /dev (config and specs keep host paths)",
    )
    add_flag(
        parser,
        "--sys-root",
        default="/sys",
        metavar="DIR",
        help="where this process sees the host's /sys (USB IDs, NUMA nodes)",
    )
    add_flag(
        parser,
        "--cdi-spec-dir",
        default="",
        metavar="DIR",
        help="write a CDI spec per resource here and name CDI devices in Allocate "
        "responses (e.g. /var/run/cdi); empty disables CDI",
    )
    add_flag(
        parser,
        "--udev-source",
        default=UdevSource.AUTO.value,
        choices=[s.value for s in UdevSource],
        help="uevents to follow: udev (needs udevd), kernel (containers without udevd), "
        "auto (udev when /run/udev/control exists), off",
    )
    add_flag(
        parser,
        "--rescan-interval",
        default=DEFAULT_RESCAN_INTERVAL,
        type=float,
        metavar="SECONDS",
        help="full rescan period behind the udev and inotify events",
    )
    add_flag(
        parser,
        "--vanished-grace",
        default=DEFAULT_VANISHED_GRACE,
        type=float,
        metavar="SECONDS",
        help="how long a device whose nodes vanished stays listed as Unhealthy "
        "(a pod may still hold it) before it is dropped",
    )


def settings_from_args(args: argparse.Namespace) -> GenericSettings:
    problem = domain_problem(args.domain)
    if problem:
        raise ConfigError("--domain", "", problem)
    for flag, value in (
        ("--rescan-interval", args.rescan_interval),
        ("--vanished-grace", args.vanished_grace),
    ):
        if not value > 0:
            raise ConfigError(flag, "", f"must be a positive number of seconds, got {value}")
    return GenericSettings(
        domain=args.domain,
        dev_root=Path(args.dev_root),
        sys_root=Path(args.sys_root),
        cdi_spec_dir=Path(args.cdi_spec_dir) if args.cdi_spec_dir else None,
        udev_source=UdevSource(args.udev_source),
        rescan_interval=args.rescan_interval,
        vanished_grace=args.vanished_grace,
    )


def backend_factory(args: argparse.Namespace) -> Callable[[], Backend]:
    """Validate flags and config now; return what builds a backend (again on SIGHUP).

    Raises ConfigError for a missing or bad config file, so the command exits
    before touching the kubelet. Each later call re-reads the file.
    """
    if not args.config:
        raise ConfigError(
            "--config", "", f"required: the devices to expose (or set {env_name('--config')})"
        )
    path = Path(args.config)
    settings = settings_from_args(args)
    first: list[GenericConfig] = [load_config(path)]

    def factory() -> Backend:
        config = first.pop() if first else load_config(path)
        # The CLI sets args.in_use from the kubelet's PodResources API (see cli.py).
        return GenericBackend(config, settings, in_use=getattr(args, "in_use", None))

    return factory
