"""The command line: the common flags, each backend's options and the built-in commands.

Every flag has an environment twin (:func:`accel_plugins.util.flags.add_flag`). A
plugin starting gets its own subcommand's parser alone, so start-up pays for
no other (issue 17).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from accel_plugins import __version__
from accel_plugins.cli.backends import (
    InstalledBackend,
    chosen_command,
    installed_backends,
    wanted_backends,
)
from accel_plugins.plugin.command import ENTRY_POINT_GROUP, Option
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


def _add_node_flag(parser: argparse.ArgumentParser) -> None:
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


def _add_kubelet_flags(parser: argparse.ArgumentParser, socket_env: Sequence[str] = ()) -> None:
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
        help="--kubelet-api dra: publish Unhealthy devices with a NoSchedule device taint "
        "(on), leave them out of the ResourceSlices (off), or taint where the API server "
        "keeps device taints, i.e. its DRADeviceTaints feature gate is on (auto)",
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


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser; a backend's ``common_aliases`` become more spellings of the
    common flags (squat's ``--plugin-directory`` for ``--plugin-dir``)."""

    def __init__(
        self, *args: Any, common_aliases: Mapping[str, tuple[str, ...]] | None = None, **kw: Any
    ) -> None:
        # Set first: ArgumentParser.__init__ already adds -h through add_argument.
        self.common_aliases = dict(common_aliases or {})
        super().__init__(*args, **kw)

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        more = [alias for name in names for alias in self.common_aliases.get(name, ())]
        return super().add_argument(*names, *more, **kwargs)


def _add_backend(sub: Any, backend: InstalledBackend) -> None:
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
    _add_kubelet_flags(p, socket_env=("KUBELET_SOCKET",))
    _add_registration_flags(p)
    _add_node_flag(p)
    _add_dra_flags(p, command.default_dra_driver_name(backend.name))
    _add_switch_flags(p)
    _add_metrics_flag(p)
    _add_pod_resources_flag(p)
    add_state_dir_flag(p)
    add_logging_flags(p)
    add_options(p, command.options)


def build_parser(
    argv: Sequence[str], backends: dict[str, InstalledBackend] | None = None
) -> argparse.ArgumentParser:
    """The whole command line; ``backends`` defaults to the installed ones ``argv`` needs."""
    if backends is None:
        backends = installed_backends(wanted_backends(argv))
    parser = argparse.ArgumentParser(
        prog="accel-plugins",
        description="Kubernetes device plugins for GPUs and /dev hardware.",
        epilog=f"Backends are the entry points of installed packages in the group "
        f"{ENTRY_POINT_GROUP}. 'accel-plugins COMMAND --help' shows a command's flags, "
        "each with its ACCEL_PLUGINS_<FLAG> environment twin.",
    )
    parser.add_argument("--version", action="version", version=f"accel-plugins {__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_CommandParser
    )
    chosen = backends.get(chosen_command(argv) or "")
    if chosen is not None and chosen.command is not None:
        # A plugin starting: its parser alone. Every other subparser costs argparse
        # a dozen gettext lookups (file stats) on the way to registration (issue 17).
        _add_backend(sub, chosen)
        return parser
    for backend in backends.values():
        _add_backend(sub, backend)

    # Its flags are the nvidia backend's: loaded only then.
    if wanted_backends(argv)("mps-control-daemon"):
        add_mps_control_daemon(sub)

    p = sub.add_parser("demo", help="walk through a plugin and an emulated kubelet, no GPU needed")
    p.add_argument("--once", action="store_true", help="exit after the walkthrough")
    p.add_argument(
        "--color",
        choices=DEMO_COLORS,
        default="auto",
        help="ANSI colours: auto (a terminal, unless NO_COLOR is set), always, never",
    )
    add_logging_flags(p)

    p = sub.add_parser("inspect", help="query any device plugin socket like the kubelet would")
    p.add_argument("socket", type=Path, help="the plugin's unix socket")
    p.add_argument(
        "--allocate", type=int, default=0, metavar="N", help="dry-run an allocation of N devices"
    )
    p.add_argument(
        "--pre-start",
        action="store_true",
        help="with --allocate: then call PreStartContainer on those devices when the plugin "
        "requires it (exit 1 when it fails)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the plugin")
    add_flag(
        p,
        "--metrics-address",
        default="",
        help="the plugin's --metrics-address: read why devices are Unhealthy from its "
        "/metrics (set in the chart's pods, so inspect run there finds it); empty: no reasons",
    )
    _add_node_flag(p)
    add_logging_flags(p)

    from accel_plugins.cli.operator_flags import add_operator_commands

    add_operator_commands(sub)

    p = sub.add_parser("kubelet", help="run the kubelet emulator (for local development)")
    _add_kubelet_flags(p)
    add_flag(
        p,
        "--pod-resources-socket",
        type=socket_path,
        default=None,
        help="also serve the PodResources API on this socket",
    )
    add_flag(
        p,
        "--plugins-registry-dir",
        type=absolute_path,
        default=None,
        help="also register the plugins whose sockets appear here, as the kubelet's plugin "
        "watcher does (the kubelet's is /var/lib/kubelet/plugins_registry)",
    )
    _add_admission_flags(p)
    add_logging_flags(p)
    return parser


def _add_admission_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--admit",
        action="append",
        type=Path,
        default=[],
        metavar="POD.yaml",
        help="admit the pods of this manifest once their resources registered, as the device "
        "manager does, and print what each container gets (repeatable)",
    )
    add_flag(
        parser,
        "--topology-policy",
        default="none",
        choices=TOPOLOGY_POLICIES,
        help="the Topology Manager policy that admits the pods' NUMA affinity",
    )
    add_flag(
        parser,
        "--numa-nodes",
        default=None,
        metavar="0,1",
        help="the machine's NUMA nodes (default: the host's and those the devices report)",
    )
    add_flag(
        parser,
        "--admit-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds to wait for the pods' resources to register before admitting",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="with --admit: exit after admitting (1 when a pod was rejected or failed to start)",
    )
    add_flag(
        parser,
        "--kubeconfig",
        default="",
        env=("KUBECONFIG",),
        metavar="FILE",
        help="with --admit: the API server's kubeconfig, where the pods' ResourceClaims are read "
        "(needed only for pods with spec.resourceClaims)",
    )
    add_flag(
        parser,
        "--cdi-spec-dir",
        type=absolute_path,
        default=("/etc/cdi", "/var/run/cdi"),
        repeat=True,
        metavar="DIR",
        help="with --admit: where the container runtime finds CDI specs, to print what a "
        "claim's CDI devices give",
    )


def add_mps_control_daemon(sub: Any) -> None:
    # NVIDIA's flags and config file, as the nvidia backend reads them (a cheap module).
    from accel_plugins.backends.nvidia.mps.mps_command import OPTIONS, SUMMARY

    p = sub.add_parser("mps-control-daemon", help=SUMMARY, description=SUMMARY)
    add_logging_flags(p)
    add_options(p, OPTIONS)
