"""The `accel-plugins` command: one entry point, a subcommand per job.

Backends come from installed packages: every entry point in the group
``accel_plugins.backends`` names a :class:`~accel_plugins.plugin.BackendCommand`
and becomes ``accel-plugins <name>`` with the common flags and its own options
(``nvidia`` and ``generic`` are registered the same way, in pyproject.toml).
Only the command being run is loaded, every one for ``--help`` (their modules
are cheap), and grpc, prometheus_client and the vendor libraries are imported
on the run path only: ``--help`` and ``--version`` stay fast, and a running
plugin pays the memory of one backend.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

# gRPC core prints an INFO line for every connection the kubelet drops (each
# kubelet restart); operators want warnings and errors only. This must run
# before grpc is first imported (on the run path, below).
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


from accel_plugins import __version__
from accel_plugins.entrypoints import EntryPointRef, entry_points
from accel_plugins.errors import AccelPluginsError, ConfigError
from accel_plugins.flags import add_flag, parse_bool
from accel_plugins.logs import LOG_FORMATS, LOG_LEVELS, fatal, setup_logging
from accel_plugins.plugin.command import ENTRY_POINT_GROUP, BackendCommand, BackendContext, Option

if TYPE_CHECKING:
    from accel_plugins.plugin.backend import Backend
    from accel_plugins.plugin.manager import Manager, ManagerSettings
    from accel_plugins.plugin.podresources import PodResourcesCache
    from accel_plugins.plugin.recorder import DeferredMetrics

log = logging.getLogger("accel_plugins")

BUILTINS = ("demo", "inspect", "kubelet", "mps-control-daemon")
EXIT_CONFIG = 2

# The modules that define these import grpc or prometheus_client; their
# equality is a test (tests/unit/test_cli_backends.py).
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_METRICS_ADDRESS = ":9478"
# accel_plugins.kubelet.topology.POLICIES (that package imports grpc).
TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
DEFAULT_PLUGINS_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
# accel_plugins.dra.driver's (that package imports grpc).
KUBELET_APIS = ("device-plugin", "dra")
DEFAULT_KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_CDI_SPEC_DIR = Path("/var/run/cdi")
REGISTRATION_MODES = ("kubelet", "plugin-watcher")
DEMO_COLORS = ("auto", "always", "never")  # accel_plugins.termstyle.COLOR_CHOICES

# Where the common flags land in the parsed arguments: a backend option may not take these.
COMMON_DESTS = frozenset(
    {
        "command",
        "help",
        "plugin_dir",
        "kubelet_socket",
        "metrics_address",
        "pod_resources_socket",
        "registration",
        "plugins_registry_dir",
        "log_format",
        "log_level",
        "node_name",
        "kubelet_api",
        "kubeconfig",
        "dra_driver_name",
        "kubelet_plugins_dir",
        "dra_cdi_spec_dir",
    }
)


@dataclass(frozen=True, slots=True)
class InstalledBackend:
    """An entry point of the backends group: loaded (``command``), broken (``problem``) or not
    loaded yet (neither)."""

    name: str
    entry_point: EntryPointRef
    command: BackendCommand | None = None
    problem: str = ""

    @property
    def origin(self) -> str:
        """``module:attr (distribution version)``, for messages."""
        return f"{self.entry_point.value} ({self.entry_point.dist})"


def _warn(message: str) -> None:
    print(f"accel-plugins: warning: {message}", file=sys.stderr)


def installed_backends(
    load: Callable[[str], bool] = lambda name: True,
) -> dict[str, InstalledBackend]:
    """The backends installed, by name in name order; those ``load`` picks are loaded.

    An entry point named like a built-in command (demo, inspect, kubelet) is
    skipped with a warning, as is a second one of a name already taken (the
    first on sys.path wins).
    """
    found: dict[str, InstalledBackend] = {}
    for entry_point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        backend = InstalledBackend(entry_point.name, entry_point)
        if entry_point.name in BUILTINS:
            _warn(
                f"backend {entry_point.name!r} from {backend.origin} is skipped: "
                f"{entry_point.name} is a built-in command"
            )
        elif entry_point.name in found:
            if found[entry_point.name].entry_point.value != entry_point.value:
                _warn(
                    f"backend {entry_point.name!r} from {backend.origin} is skipped: "
                    f"{found[entry_point.name].origin} has that name"
                )
        else:
            found[entry_point.name] = _load(backend) if load(entry_point.name) else backend
    return found


def _load(backend: InstalledBackend) -> InstalledBackend:
    value = backend.entry_point.value
    try:
        command = backend.entry_point.load()
    except Exception as exc:  # a third party's module may fail in any way
        return replace(backend, problem=f"cannot load {value}: {type(exc).__name__}: {exc}")
    if not isinstance(command, BackendCommand):
        kind = type(command).__name__
        return replace(backend, problem=f"{value} is a {kind}, not a BackendCommand")
    taken = sorted(option.flag for option in command.options if option.dest in COMMON_DESTS)
    if taken:
        return replace(backend, problem=f"options {', '.join(taken)} clash with common flags")
    common = {"--" + dest.replace("_", "-") for dest in COMMON_DESTS}
    odd = sorted(set(command.common_aliases) - common)
    odd += sorted(a for v in command.common_aliases.values() for a in v if a in common)
    if odd:
        problem = f"common_aliases {', '.join(odd)}: not an alias of a common flag"
        return replace(backend, problem=problem)
    return replace(backend, command=command)


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


def _add_logging_flags(parser: argparse.ArgumentParser) -> None:
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
        "in log lines, the build info metric and inspect's report; with --kubelet-api dra "
        "it is required and names the pool of the node's ResourceSlices",
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
        help="--kubelet-api dra: the API server's kubeconfig (default: the pod's service account)",
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


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the top level takes no option with a value)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def _wanted(argv: Sequence[str]) -> Callable[[str], bool]:
    """Which backends to load: the one being run, or all for the command list of --help."""
    chosen = _chosen(argv)
    if chosen is not None:
        return lambda name: name == chosen
    if "--version" in argv and not {"-h", "--help"} & set(argv):
        return lambda name: False
    return lambda name: True


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
    _add_metrics_flag(p)
    _add_pod_resources_flag(p)
    _add_logging_flags(p)
    add_options(p, command.options)


def build_parser(
    argv: Sequence[str], backends: dict[str, InstalledBackend] | None = None
) -> argparse.ArgumentParser:
    """The whole command line; ``backends`` defaults to the installed ones ``argv`` needs."""
    if backends is None:
        backends = installed_backends(_wanted(argv))
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
    chosen = backends.get(_chosen(argv) or "")
    if chosen is not None and chosen.command is not None:
        # A plugin starting: its parser alone. Every other subparser costs argparse
        # a dozen gettext lookups (file stats) on the way to registration (issue 17).
        _add_backend(sub, chosen)
        return parser
    for backend in backends.values():
        _add_backend(sub, backend)

    if _wanted(argv)("mps-control-daemon"):  # its flags are the nvidia backend's: load only then
        _add_mps_control_daemon(sub)

    p = sub.add_parser("demo", help="walk through a plugin and an emulated kubelet, no GPU needed")
    p.add_argument("--once", action="store_true", help="exit after the walkthrough")
    p.add_argument(
        "--color",
        choices=DEMO_COLORS,
        default="auto",
        help="ANSI colours: auto (a terminal, unless NO_COLOR is set), always, never",
    )
    _add_logging_flags(p)

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
    _add_node_flag(p)
    _add_logging_flags(p)

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
    _add_logging_flags(p)
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


async def serve(
    factory: Callable[[], Backend],
    settings: ManagerSettings,
    metrics_address: tuple[str, int] | None = None,
    pod_resources: PodResourcesCache | None = None,
    config_files: Sequence[Path] = (),
    node_name: str = "",
) -> int:
    """Run the manager until SIGTERM/SIGINT (exit 0); SIGHUP reloads the configuration.

    So does a change of any of ``config_files`` (watched with inotify): a
    ConfigMap update reaches the backend without a restart.

    Metrics go into a registry of this call's own; ``pod_resources`` names the
    pods holding each device on the device and GPU series. The metrics port is
    bound first (a taken port fails before the kubelet hears of us), but
    prometheus_client and the collectors load only once the kubelet has every
    resource's devices, or after METRICS_AFTER at most: registration does not
    wait for them (issue 17), and the events before are replayed. This is what
    ``accel-plugins <backend>`` runs after ``build``; a backend of your own
    becomes a command through an entry point (see the module docstring), not
    by calling this.
    """
    from accel_plugins.plugin.config_watch import watch_configs
    from accel_plugins.plugin.manager import Manager
    from accel_plugins.plugin.recorder import DeferredMetrics

    listener = _metrics_listener(metrics_address) if metrics_address is not None else None
    recorder = DeferredMetrics()
    manager = Manager(factory, settings, metrics=recorder)
    if pod_resources is not None:
        pod_resources.touch()  # the first scrape then has pods to name
    loop = asyncio.get_running_loop()
    stopping: set[asyncio.Task[None]] = set()

    def stop() -> None:
        log.info("stopping")
        stopping.add(asyncio.ensure_future(manager.stop()))

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGHUP, manager.reload)
    config_watch = watch_configs(config_files, lambda _path: manager.reload())
    # Modules, protobuf descriptors and gRPC state live as long as the process:
    # moved out of the collector's reach, full collections stay short. Done once
    # the plugin is up, without a collection first (one costs about 9 ms of CPU
    # and start-up leaves almost no cyclic garbage); the console script keeps the
    # collector off until then (accel_plugins.launch).
    freezing = loop.call_later(FREEZE_HEAP_AFTER, _freeze_heap)
    running = asyncio.ensure_future(manager.run())
    metrics = None
    try:
        await _until_listed(manager, recorder, running, METRICS_AFTER)
        if not running.done():
            # The kubelet may call at once: what loads late loads in threads, not on the
            # loop, and hands the interpreter back to the loop often meanwhile.
            switch = sys.getswitchinterval()
            sys.setswitchinterval(WARM_SWITCH_INTERVAL)
            try:
                warming = asyncio.ensure_future(warm_backend(manager.backend))
                await asyncio.to_thread(importlib.import_module, "accel_plugins.metrics.wiring")
                await warming
            finally:
                sys.setswitchinterval(switch)
            from accel_plugins.metrics import metrics_server

            metrics = metrics_server(manager, recorder, pod_resources, node_name)
            if listener is not None:
                await metrics.start(sock=listener)
        await running
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        if config_watch is not None:
            config_watch.close()
        freezing.cancel()
        if not running.done():  # cancelled from outside
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        if metrics is not None:
            await metrics.stop()
        if listener is not None:
            listener.close()
    return 0


METRICS_AFTER = 1.0  # seconds: metrics start by then even while no kubelet answers
WARM_SWITCH_INTERVAL = 0.0005  # seconds: a gRPC call waits at most this for the interpreter


async def warm_backend(backend: object) -> None:
    """Let a :class:`~accel_plugins.plugin.backend.Warmer` load ahead, in a worker thread."""
    from accel_plugins.plugin.backend import Warmer

    if isinstance(backend, Warmer):
        try:
            await asyncio.to_thread(backend.warm)
        except Exception:
            log.exception("warming the backend up failed; its first calls load what they need")


def _metrics_listener(address: tuple[str, int]) -> socket.socket:
    """The metrics port, bound and listening now; AccelPluginsError when it cannot be."""
    host, port = address
    # No getaddrinfo: it loads the IDNA codec (stringprep and all) for any host name.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.create_server((host, port), family=family, backlog=100)
    except OSError as exc:
        raise AccelPluginsError(f"cannot serve metrics on {address}: {exc}") from exc
    listener.setblocking(False)
    return listener


async def _until_listed(
    manager: Manager, recorder: DeferredMetrics, running: asyncio.Future[None], limit: float
) -> None:
    """Wait until the kubelet has opened ListAndWatch for every resource served, at most
    ``limit`` seconds, or until the manager stops."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not running.done():
        served = [s.resource for s in manager.status().values() if s.serving]
        if served and recorder.streamed.issuperset(served):
            return
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        recorder.changed.clear()
        changed: asyncio.Future[Any] = asyncio.ensure_future(recorder.changed.wait())
        waiting: set[asyncio.Future[Any]] = {running, changed}
        await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        changed.cancel()


FREEZE_HEAP_AFTER = 2.0  # seconds after start; registration takes milliseconds


def _freeze_heap() -> None:
    gc.freeze()
    gc.enable()
    # The dataclass methods compiled while starting, for the next start (launch installs it).
    from accel_plugins import codecache

    codecache.save()


def _missing(modules: Iterable[str]) -> list[str]:
    absent = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that fails, or a bad name
            found = False
        if not found:
            absent.append(module)
    return absent


def _not_installed(name: str, command: BackendCommand, missing: Sequence[str]) -> int:
    which = "which is" if len(missing) == 1 else "which are"
    fatal(
        f"accel-plugins: backend {name} needs {', '.join(missing)}, {which} not installed: "
        f"{command.install_hint()}"
    )
    return EXIT_CONFIG


def _run_backend(name: str, command: BackendCommand, args: argparse.Namespace) -> int:
    missing = _missing(command.requires)
    if missing:
        return _not_installed(name, command, missing)
    if args.registration == "plugin-watcher" and args.plugins_registry_dir == args.plugin_dir:
        # Both sockets of a resource carry its name: one directory cannot hold both.
        raise ConfigError(
            "--plugins-registry-dir", "", f"{args.plugin_dir} must differ from --plugin-dir"
        )
    dra = _dra_settings(args) if args.kubelet_api == "dra" else None
    from accel_plugins.metrics.address import parse_address
    from accel_plugins.plugin.manager import ManagerSettings
    from accel_plugins.plugin.podresources import PodResourcesCache

    metrics_address = parse_address(args.metrics_address)
    # Backends learn which devices pods hold through ctx.in_use (they never
    # speak gRPC themselves); None answers mean "unknown right now".
    pod_resources = PodResourcesCache(args.pod_resources_socket)
    ctx = BackendContext(
        options=MappingProxyType({o.dest: getattr(args, o.dest) for o in command.options}),
        in_use=pod_resources.in_use,
        environ=MappingProxyType(dict(os.environ)),
    )
    try:
        factory = command.build(ctx)  # validates config before any socket work
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.partition(".")[0] in command.requires:
            return _not_installed(name, command, [exc.name])
        raise
    by_flag = {option.flag: option.dest for option in command.options}
    config_files = [
        Path(value) for flag in command.config_files if (value := getattr(args, by_flag[flag]))
    ]
    if dra is not None:
        from accel_plugins.dra.run import serve_dra

        gc.enable()  # off since the console script started (accel_plugins.launch)

        return asyncio.run(
            serve_dra(factory, dra, args.kubeconfig or None, metrics_address, config_files)
        )
    settings = ManagerSettings(
        plugin_dir=args.plugin_dir,
        kubelet_socket=args.kubelet_socket,
        registration=args.registration,
        plugins_registry_dir=args.plugins_registry_dir,
    )
    return asyncio.run(
        serve(factory, settings, metrics_address, pod_resources, config_files, args.node_name)
    )


def _dra_settings(args: argparse.Namespace) -> Any:
    """The DRA driver's settings (ConfigError, exit 2, for a bad name or no node name).

    Only here is accel_plugins.dra imported: device-plugin mode never loads it.
    """
    from accel_plugins.dra.driver import DraSettings

    return DraSettings(
        driver_name=args.dra_driver_name,
        node_name=args.node_name,
        kubelet_plugins_dir=args.kubelet_plugins_dir,
        plugins_registry_dir=args.plugins_registry_dir,
        cdi_spec_dir=args.dra_cdi_spec_dir,
    )


def _run_inspect(args: argparse.Namespace) -> int:
    from accel_plugins.inspect import inspect_plugin, render_json, render_text

    report = asyncio.run(
        inspect_plugin(
            args.socket,
            allocate=args.allocate,
            timeout=args.timeout,
            pre_start=args.pre_start,
            node=args.node_name,
        )
    )
    print(render_json(report) if args.json else render_text(report))
    return 1 if report.pre_start_failed else 0


def _run_kubelet(args: argparse.Namespace) -> int:
    from accel_plugins.kubelet import serve as serve_kubelet

    plugin_dir: Path = args.plugin_dir
    socket: Path | None = args.kubelet_socket
    if socket is not None and socket.parent != plugin_dir:
        # Plugins name their endpoint relative to the kubelet socket's directory.
        raise ConfigError("--kubelet-socket", "", f"{socket} must be inside --plugin-dir")
    registry: Path | None = args.plugins_registry_dir
    if registry is not None and registry == plugin_dir:
        raise ConfigError("--plugins-registry-dir", "", f"{registry} must differ from --plugin-dir")

    def echo(line: str) -> None:
        print(line, flush=True)

    # --admit: pods admitted once the plugins registered (pod manifests read first, exit 2).
    admission = _admission(args, echo)

    async def main() -> int:
        task = asyncio.ensure_future(
            serve_kubelet(
                plugin_dir,
                pod_resources_socket=args.pod_resources_socket,
                on_event=echo,
                socket_name=socket.name if socket else "kubelet.sock",
                plugins_registry_dir=registry,
                **admission,
            )
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            return await task or 0
        return 0

    return asyncio.run(main())


def _admission(args: argparse.Namespace, echo: Callable[[str], None]) -> dict[str, Any]:
    if not args.admit:
        if args.once:
            raise ConfigError("--once", "", "needs --admit (there is nothing to do once)")
        return {}
    from accel_plugins.kubelet.admission import admitting

    return {
        "then": admitting(
            args.admit,
            policy=args.topology_policy,
            numa_nodes=args.numa_nodes,
            timeout=args.admit_timeout,
            once=args.once,
            echo=echo,
            kubeconfig=args.kubeconfig or None,
            cdi_spec_dirs=args.cdi_spec_dir,
        )
    }


def _add_mps_control_daemon(sub: Any) -> None:
    # NVIDIA's flags and config file, as the nvidia backend reads them (a cheap module).
    from accel_plugins.backends.nvidia.mps_command import OPTIONS, SUMMARY

    p = sub.add_parser("mps-control-daemon", help=SUMMARY, description=SUMMARY)
    _add_logging_flags(p)
    add_options(p, OPTIONS)


def _run_mps_control_daemon(args: argparse.Namespace) -> int:
    from accel_plugins.backends.nvidia.mps_command import OPTIONS, run

    options = {o.dest: getattr(args, o.dest) for o in OPTIONS}
    if not options["simulate"] and _missing(["pynvml"]):
        fatal("accel-plugins: mps-control-daemon needs pynvml: pip install 'accel-plugins[nvidia]'")
        return EXIT_CONFIG
    return run(MappingProxyType(options), MappingProxyType(dict(os.environ)))


def _run_demo(args: argparse.Namespace) -> int:
    try:
        from accel_plugins.demo import run_demo
    except ModuleNotFoundError as exc:  # the demo runs both vendors' backends
        if exc.name not in ("pynvml", "pyudev"):
            raise
        print(
            f"accel-plugins: demo needs {exc.name}, which is not installed: "
            "pip install 'accel-plugins[all]'",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    from accel_plugins.termstyle import wants_color

    color = wants_color(args.color, sys.stdout, os.environ)
    return asyncio.run(run_demo(once=args.once, out=sys.stdout, color=color))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    backends = installed_backends(_wanted(argv))
    chosen = backends.get(_chosen(argv) or "")
    if chosen is not None and chosen.problem:
        print(
            f"accel-plugins: backend {chosen.name} is unavailable: {chosen.problem}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    args = build_parser(argv, backends).parse_args(argv)
    setup_logging(args.log_format, args.log_level, node=getattr(args, "node_name", ""))
    runners: dict[str, Callable[[argparse.Namespace], int]] = {
        "inspect": _run_inspect,
        "kubelet": _run_kubelet,
        "demo": _run_demo,
        "mps-control-daemon": _run_mps_control_daemon,
    }
    prefix = f"accel-plugins {args.command}"
    try:
        command = backends[args.command].command if args.command in backends else None
        if command is not None:
            return _run_backend(args.command, command, args)
        gc.enable()  # off since the console script started (accel_plugins.launch)
        return runners[args.command](args)
    except ConfigError as exc:
        fatal(f"{prefix}: configuration error: {exc}")
        return EXIT_CONFIG
    except AccelPluginsError as exc:
        fatal(f"{prefix}: error: {exc}")
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
