"""The flags every backend's subcommand takes, and a backend's own options.

Every flag has an environment twin (:func:`accel_plugins.util.flags.add_flag`).
The flag groups here (kubelet sockets, registration, DRA, the mode switch,
metrics, logging, ...) are shared with the built-in commands
(:mod:`accel_plugins.cli.builtin_flags`, :mod:`accel_plugins.cli.operator_flags`);
the constants mirror values owned by modules a plugin must not import before it
serves. The whole command line is put together in :mod:`accel_plugins.cli.main`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from accel_plugins.cli.backends import InstalledBackend
from accel_plugins.plugin.command import Option
from accel_plugins.util.flags import add_flag, parse_bool
from accel_plugins.util.logs import LOG_FORMATS, LOG_LEVELS

# The modules that define these import grpc or prometheus_client; their
# equality is a test (tests/unit/cli/test_cli_backends.py).
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_METRICS_ADDRESS = ":9478"
# accel_plugins.kubelet_emulator.topology.POLICIES (that package imports grpc).
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
DEFAULT_PLUGINS_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
# accel_plugins.dra.driver's (that package imports grpc).
KUBELET_APIS = ("device-plugin", "dra")
# accel_plugins.dra.kube.taints.TaintMode (that package imports lightkube).
DRA_DEVICE_TAINTS = ("auto", "on", "off")
DRA_SHARED_DEVICES = ("auto", "on", "off")
DRA_ROLLING_UPDATE = ("auto", "on", "off")
DEFAULT_KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_CDI_SPEC_DIR = Path("/var/run/cdi")
REGISTRATION_MODES = ("kubelet", "plugin-watcher")
DEMO_COLORS = ("auto", "always", "never")  # accel_plugins.util.termstyle.COLOR_CHOICES
DEFAULT_STATE_DIR = Path("/var/lib/accel-plugins")  # accel_plugins.runtime.cordon's


def _converter(option: Option) -> Callable[[str], Any]:
    """``option.type``, a function's ValueError message shown (argparse hides it).

    Classes (int, float, Path, enums) keep argparse's own "invalid int value"
    message; parse_bool is kept as is, add_flag recognises it (bare flag).
    """
    convert = option.type
    if isinstance(convert, type) or convert is parse_bool:
        return convert

    def converted(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc) or f"invalid value {text!r}") from exc

    converted.__name__ = getattr(convert, "__name__", "value")
    return converted


def add_options(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Add a backend's options to ``parser``, each with its environment twins, as the CLI does."""
    for option in options:
        add_flag(
            parser,
            option.flag,
            default=option.default,
            help=option.help,
            type=_converter(option),
            env=option.env,
            choices=option.choices or None,
            metavar=option.metavar,
            aliases=option.aliases,
            repeat=option.repeat,
        )


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--log-format", default="text", choices=LOG_FORMATS, help="log line format")
    add_flag(parser, "--log-level", default="info", choices=LOG_LEVELS, help="least severe level")


def add_node_flag(parser: argparse.ArgumentParser) -> None:
    """--node-name, one definition for every command that runs on a node."""
    add_flag(
        parser,
        "--node-name",
        default="",
        env=("NODE_NAME",),
        help="this node's name (the downward API's spec.nodeName; the chart sets NODE_NAME): "
        "in log lines, the build info metric, inspect's report and the Node the device "
        "health Events are about; with --kubelet-api dra it is required and names the pool "
        "of the node's ResourceSlices",
    )


def add_kubelet_flags(parser: argparse.ArgumentParser, socket_env: Sequence[str] = ()) -> None:
    add_flag(
        parser,
        "--plugin-dir",
        type=socket_path,
        default=DEFAULT_PLUGIN_DIR,
        help="directory of the kubelet's device plugin sockets",
    )
    add_flag(
        parser,
        "--kubelet-socket",
        type=socket_path,
        default=None,
        env=socket_env,
        help="the kubelet's registration socket (default: <plugin-dir>/kubelet.sock)",
    )


def socket_path(text: str) -> Path:
    """A socket or its directory, made absolute against the working directory.

    gRPC reads ``unix://dir/x.sock`` as an authority, not a relative path, so a
    relative --plugin-dir could never be served and the plugin retried forever.
    """
    return Path(text).absolute()


def absolute_path(text: str) -> Path:
    """A flag's path that must be absolute (the kubelet dials it from its own cwd)."""
    path = Path(text)
    if not path.is_absolute():
        raise argparse.ArgumentTypeError(f"{text!r} must be an absolute path")
    return path


def _add_registration_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--registration",
        default="kubelet",
        choices=REGISTRATION_MODES,
        help="how resources get registered: kubelet (Register on the kubelet socket) or "
        "plugin-watcher (a registration socket in --plugins-registry-dir)",
    )
    add_flag(
        parser,
        "--plugins-registry-dir",
        type=absolute_path,
        default=DEFAULT_PLUGINS_REGISTRY_DIR,
        help="directory the kubelet's plugin watcher watches (--registration plugin-watcher)",
    )


def _add_dra_flags(parser: argparse.ArgumentParser, driver_name: str) -> None:
    add_flag(
        parser,
        "--kubelet-api",
        default="device-plugin",
        choices=KUBELET_APIS,
        help="how the kubelet gets the devices: device-plugin (one resource per device "
        "kind) or dra (a Dynamic Resource Allocation driver: ResourceSlices and claims)",
    )
    add_flag(
        parser,
        "--kubeconfig",
        default="",
        env=("KUBECONFIG",),
        metavar="FILE",
        help="the API server's kubeconfig (default: the pod's service account): ResourceSlices "
        "and claims with --kubelet-api dra, and in both modes the Node Events about device "
        "health (skipped when there is no API access)",
    )
    add_flag(
        parser,
        "--kube-api-qps",
        type=float,
        default=5.0,
        metavar="QPS",
        help="API requests per second on average, client-go's default (0: no limit); "
        "holds a loop gone wrong to it, so a fleet of nodes cannot flood the API server",
    )
    add_flag(
        parser,
        "--kube-api-burst",
        type=int,
        default=100,
        metavar="N",
        help="API requests at once after a quiet spell (the kubelet's burst: a storm of "
        "claims or device changes passes at once)",
    )
    add_flag(
        parser,
        "--kube-api-retry-jitter",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="each API retry waits its backoff stretched by up to this factor of itself, at "
        "random (client-go's 1.0), so a fleet's nodes come back spread after an API server "
        "restart; 0 retries in step (only to measure what jitter saves: hack/bench-fleet)",
    )
    add_flag(
        parser,
        "--dra-driver-name",
        default=driver_name,
        help="--kubelet-api dra: the driver name (a DNS subdomain)",
    )
    add_flag(
        parser,
        "--kubelet-plugins-dir",
        type=absolute_path,
        default=DEFAULT_KUBELET_PLUGINS_DIR,
        help="--kubelet-api dra: the kubelet's plugins directory; the driver serves "
        "<dir>/<driver>/dra.sock and keeps its checkpoint there",
    )
    add_flag(
        parser,
        "--dra-cdi-spec-dir",
        type=absolute_path,
        default=DEFAULT_CDI_SPEC_DIR,
        metavar="DIR",
        help="--kubelet-api dra: where each prepared claim's CDI spec is written",
    )
    add_flag(
        parser,
        "--dra-device-taints",
        default="auto",
        choices=DRA_DEVICE_TAINTS,
        help="--kubelet-api dra: publish Unhealthy devices with a device taint (on; effect "
        "None for informational reasons where the API server takes it, 1.35+, else "
        "NoSchedule), leave them out of the ResourceSlices (off), or taint where the API "
        "server keeps device taints, i.e. its DRADeviceTaints feature gate is on (auto)",
    )
    add_flag(
        parser,
        "--pod-uid",
        default="",
        env=("POD_UID",),
        help="--kubelet-api dra: this pod's UID (the downward API's metadata.uid; the chart "
        "sets POD_UID), which names the sockets of one pod of a rolling update",
    )
    add_flag(
        parser,
        "--dra-rolling-update",
        default="auto",
        choices=DRA_ROLLING_UPDATE,
        help="--kubelet-api dra: serve sockets named after --pod-uid, so the old and new pod "
        "of a rollout serve side by side and the newest publishes the slices (on: needs "
        "kubelets 1.33+), the fixed names, one pod at a time (off), or named after the pod "
        "where --pod-uid is set and the node's kubelet is 1.33 or newer (auto)",
    )
    add_flag(
        parser,
        "--dra-shared-devices",
        default="auto",
        choices=DRA_SHARED_DEVICES,
        help="--kubelet-api dra: publish the replicas of a shared device once, for as many "
        "claims as it has replicas (on: consumable capacity, KEP-5075, needs the "
        "DRAConsumableCapacity gate on the API server and scheduler), as one device per "
        "replica (off), or once where the API server keeps allowMultipleAllocations (auto)",
    )


def add_state_dir_flag(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--state-dir",
        type=absolute_path,
        default=DEFAULT_STATE_DIR,
        metavar="DIR",
        help="the node's accel-plugins state (a host path every plugin and mode shares): "
        "cordons.json, which 'accel-plugins cordon' edits and the plugins watch",
    )


def _add_switch_flags(parser: argparse.ArgumentParser) -> None:
    """The per-node switch between the two modes (docs/migration.md)."""
    add_flag(
        parser,
        "--kubelet-api-switch-label",
        default="",
        metavar="LABEL",
        help="the node label that picks this node's mode (the chart's accel-plugins.io/"
        "kubelet-api); set, the plugin waits before publishing until the other mode holds and "
        "advertises none of our devices, and a DRA driver stopping because the label moved "
        "the node deletes its ResourceSlices first; empty: no switch",
    )
    add_flag(
        parser,
        "--kubelet-api-default",
        default="device-plugin",
        choices=KUBELET_APIS,
        help="with --kubelet-api-switch-label: the mode of nodes without the label",
    )


def _add_pod_resources_flag(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--pod-resources-socket",
        type=socket_path,
        default=DEFAULT_POD_RESOURCES_SOCKET,
        help="the kubelet's PodResources API, to learn which devices pods hold",
    )


def _add_metrics_flag(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--metrics-address",
        default=DEFAULT_METRICS_ADDRESS,
        help="host:port for /metrics and /healthz; empty disables",
    )


def add_backend_command(sub: Any, backend: InstalledBackend) -> None:
    """``accel-plugins <backend>``: the common flags, then the backend's own options.

    ``sub`` must make :class:`~accel_plugins.cli.main.CommandParser` parsers (they take
    ``common_aliases``); a backend that failed to load is listed without flags.
    """
    command = backend.command
    if command is None:
        # Listed when it failed to load (main exits 2 with the reason before parsing).
        kwargs = {"help": f"unavailable: {backend.problem}"} if backend.problem else {}
        sub.add_parser(backend.name, **kwargs)
        return
    p = sub.add_parser(
        backend.name,
        help=command.summary,
        description=command.summary,
        common_aliases=command.common_aliases,
    )
    # NVIDIA's plugin reads KUBELET_SOCKET too; ours wins when both are set.
    add_kubelet_flags(p, socket_env=("KUBELET_SOCKET",))
    _add_registration_flags(p)
    add_node_flag(p)
    _add_dra_flags(p, command.default_dra_driver_name(backend.name))
    _add_switch_flags(p)
    _add_metrics_flag(p)
    _add_pod_resources_flag(p)
    add_state_dir_flag(p)
    add_logging_flags(p)
    add_options(p, command.options)
