"""``accel-plugins generic``: the entry point (group ``accel_plugins.backends``).

Cheap to import: ``accel-plugins --help`` loads it to list the backend. pyudev,
YAML and the backend itself are imported inside :func:`build`. The defaults
below mirror constants of the heavy modules (backend.py, health.py,
monitor.py); tests/unit/cli/test_cli_backends.py keeps them equal.

Every flag has an environment twin (``--dev-root`` / ``ACCEL_PLUGINS_DEV_ROOT``).
squat's generic-device-plugin's flags are taken as it spells them (its config.go,
commit 179b1fe): ``--device`` (repeated), ``--domain``, ``--config``, and
``--plugin-directory`` / ``--listen`` for our ``--plugin-dir`` / ``--metrics-address``,
so its DaemonSet's container args run unchanged. The domain is ``--domain``, else
the config file's ``domain``, else squat's ``squat.ai`` when ``--device`` gives the
devices (squat's resource names), else ``accel-plugins.io``.
"""

from __future__ import annotations

from types import MappingProxyType

from accel_plugins.backends.generic.names import DEFAULT_DOMAIN
from accel_plugins.plugin.command import BackendCommand, BackendContext, BackendFactory, Option
from accel_plugins.util.flags import parse_bool

UDEV_SOURCES = ("auto", "udev", "kernel", "off")
# squat's default --domain (config.go's defaultDomain).
SQUAT_DOMAIN = "squat.ai"
# squat's spellings of our common flags (config.go). Its --listen serves its own /health
# and metrics; ours /healthz and accel_plugins_* (README, "Migrating from squat's ...").
SQUAT_FLAGS = MappingProxyType(
    {"--plugin-dir": ("--plugin-directory",), "--metrics-address": ("--listen",)}
)
DEFAULT_RESCAN_INTERVAL = 5.0
DEFAULT_VANISHED_GRACE = 300.0

OPTIONS = (
    Option(
        "--config",
        "YAML file listing the devices to expose (squat's format plus udev matchers); "
        "required unless --device is given",
        metavar="FILE",
    ),
    Option(
        "--device",
        "one device to expose, YAML or JSON as in a config file's list (squat's flag; "
        "repeat it for more); replaces the config file's devices",
        default=(),
        metavar="SPEC",
        repeat=True,
    ),
    Option(
        "--domain",
        "domain of the resource names (<domain>/<name>); without it, the config file's "
        f"domain, else {SQUAT_DOMAIN} with --device (squat's default), else {DEFAULT_DOMAIN}",
    ),
    Option(
        "--dev-root",
        "where this process sees the host's /dev (config and specs keep host paths)",
        default="/dev",
        metavar="DIR",
    ),
    Option(
        "--sys-root",
        "where this process sees the host's /sys (USB IDs, NUMA nodes)",
        default="/sys",
        metavar="DIR",
    ),
    Option(
        "--cdi-spec-dir",
        "write a CDI spec per resource here and name CDI devices in Allocate responses "
        "(e.g. /var/run/cdi); empty disables CDI",
        default="",
        metavar="DIR",
    ),
    Option(
        "--udev-source",
        "uevents to follow: udev (udevd's, heard only in udevd's network namespace), "
        "kernel (the kernel's, heard in a pod's own network namespace too), "
        "auto (udev when udevd listens in this network namespace, else kernel), off",
        default="auto",
        choices=UDEV_SOURCES,
    ),
    Option(
        "--rescan-interval",
        "full rescan period behind the udev and inotify events",
        default=DEFAULT_RESCAN_INTERVAL,
        type=float,
        metavar="SECONDS",
    ),
    Option(
        "--vanished-grace",
        "how long a device whose nodes vanished stays listed as Unhealthy "
        "(a pod may still hold it) before it is dropped",
        default=DEFAULT_VANISHED_GRACE,
        type=float,
        metavar="SECONDS",
    ),
    Option(
        "--check-config",
        "print what each config entry matches on this node and exit: 0 when each matches "
        "something, 2 when one matches nothing (the kubelet is not contacted)",
        default=False,
        type=parse_bool,
    ),
)


def build(ctx: BackendContext) -> BackendFactory:
    """Validate flags and the config file now; the factory re-reads the file (SIGHUP)."""
    from accel_plugins.backends.generic.factory import backend_factory, check_config

    factory = backend_factory(ctx.options, ctx.in_use, ctx.refresh_in_use)
    if ctx.options.get("check_config"):
        # Before any socket or port: a dry run of discovery, then the process ends.
        raise SystemExit(check_config(factory))
    return factory


COMMAND = BackendCommand(
    summary="expose /dev nodes (udev, path globs) as extended resources",
    build=build,
    options=OPTIONS,
    requires=("pyudev",),
    extra="generic",
    config_files=("--config",),
    common_aliases=SQUAT_FLAGS,
)
