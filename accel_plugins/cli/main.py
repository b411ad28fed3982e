"""The `accel-plugins` command: one entry point, a subcommand per job.

Backends come from installed packages: every entry point in the group
``accel_plugins.backends`` names a :class:`~accel_plugins.plugin.BackendCommand`
and becomes ``accel-plugins <name>`` with the common flags and its own options
(``nvidia`` and ``generic`` are registered the same way, in pyproject.toml).
Only the command being run is loaded, every one for ``--help`` (their modules
are cheap), and grpc, prometheus_client and the vendor libraries are imported
on the run path only: ``--help`` and ``--version`` stay fast, and a running
plugin pays the memory of one backend.

This module is the entry point (:func:`main`) and the built-in commands'
runners; which backends are installed is :mod:`accel_plugins.cli.backends`,
the parser here (:func:`build_parser`; its flags in ``cli.flags``,
``cli.builtin_flags`` and ``cli.operator_flags``), running a backend
:mod:`accel_plugins.cli.serve`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from accel_plugins import __version__
from accel_plugins.cli.backends import (
    BUILTINS,
    COMMON_DESTS,
    InstalledBackend,
    chosen_command,
    installed_backends,
    wanted_backends,
)
from accel_plugins.cli.flags import (
    DEFAULT_CDI_SPEC_DIR,
    DEFAULT_KUBELET_PLUGINS_DIR,
    DEFAULT_METRICS_ADDRESS,
    DEFAULT_PLUGIN_DIR,
    DEFAULT_PLUGINS_REGISTRY_DIR,
    DEFAULT_POD_RESOURCES_SOCKET,
    DEMO_COLORS,
    DRA_DEVICE_TAINTS,
    DRA_SHARED_DEVICES,
    KUBELET_APIS,
    REGISTRATION_MODES,
    TOPOLOGY_POLICIES,
    absolute_path,
    add_backend_command,
    add_options,
    socket_path,
)
from accel_plugins.cli.serve import EXIT_CONFIG, missing_modules, run_backend
from accel_plugins.deviceplugin.run import FREEZE_HEAP_AFTER, METRICS_AFTER, serve
from accel_plugins.errors import AccelPluginsError, ConfigError
from accel_plugins.plugin.command import ENTRY_POINT_GROUP
from accel_plugins.util.logs import fatal, setup_logging

# The names importable from here before the split (tests, hack/bench, third parties).
__all__ = [
    "BUILTINS",
    "COMMON_DESTS",
    "DEFAULT_CDI_SPEC_DIR",
    "DEFAULT_KUBELET_PLUGINS_DIR",
    "DEFAULT_METRICS_ADDRESS",
    "DEFAULT_PLUGINS_REGISTRY_DIR",
    "DEFAULT_PLUGIN_DIR",
    "DEFAULT_POD_RESOURCES_SOCKET",
    "DEMO_COLORS",
    "DRA_DEVICE_TAINTS",
    "DRA_SHARED_DEVICES",
    "EXIT_CONFIG",
    "FREEZE_HEAP_AFTER",
    "KUBELET_APIS",
    "METRICS_AFTER",
    "REGISTRATION_MODES",
    "TOPOLOGY_POLICIES",
    "InstalledBackend",
    "absolute_path",
    "add_options",
    "build_parser",
    "installed_backends",
    "main",
    "serve",
    "socket_path",
]


# -- the parser ----------------------------------------------------------------------
# A plugin starting gets its own subcommand's parser alone, so start-up pays neither for
# the other backends nor for the built-in and operator commands (issue 17).


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, with the terminal's width found as ``shutil`` finds it but
    without importing ``shutil``: argparse makes a formatter for every flag it adds, and
    ``shutil`` brings the bz2 and lzma modules onto a starting plugin's path (issue 34)."""

    def __init__(self, prog: str, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("width", _terminal_columns() - 2)
        super().__init__(prog, *args, **kwargs)


def _terminal_columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):  # not a terminal, or closed
            columns = 0
    return columns if columns > 0 else 80


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser; a backend's ``common_aliases`` become more spellings of the
    common flags (squat's ``--plugin-directory`` for ``--plugin-dir``)."""

    def __init__(
        self, *args: Any, common_aliases: Mapping[str, tuple[str, ...]] | None = None, **kw: Any
    ) -> None:
        # Set first: ArgumentParser.__init__ already adds -h through add_argument.
        self.common_aliases = dict(common_aliases or {})
        kw.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kw)

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        more = [alias for name in names for alias in self.common_aliases.get(name, ())]
        return super().add_argument(*names, *more, **kwargs)


def build_parser(
    argv: Sequence[str], backends: dict[str, InstalledBackend] | None = None
) -> argparse.ArgumentParser:
    """The whole command line; ``backends`` defaults to the installed ones ``argv`` needs."""
    if backends is None:
        backends = installed_backends(wanted_backends(argv))
    parser = argparse.ArgumentParser(
        prog="accel-plugins",
        formatter_class=HelpFormatter,
        description="Kubernetes device plugins for GPUs and /dev hardware.",
        epilog=f"Backends are the entry points of installed packages in the group "
        f"{ENTRY_POINT_GROUP}. 'accel-plugins COMMAND --help' shows a command's flags, "
        "each with its ACCEL_PLUGINS_<FLAG> environment twin.",
    )
    parser.add_argument("--version", action="version", version=f"accel-plugins {__version__}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=CommandParser
    )
    chosen = backends.get(chosen_command(argv) or "")
    if chosen is not None and chosen.command is not None:
        # A plugin starting: its parser alone. Every other subparser costs argparse
        # a dozen gettext lookups (file stats) on the way to registration (issue 17).
        add_backend_command(sub, chosen)
        return parser
    for backend in backends.values():
        add_backend_command(sub, backend)

    # Imported here, not at the top: a plugin starting returned above without them.
    from accel_plugins.cli.builtin_flags import (
        add_conformance_command,
        add_demo_command,
        add_inspect_command,
        add_kubelet_command,
        add_mps_control_daemon,
    )
    from accel_plugins.cli.operator_flags import add_operator_commands

    # Its flags are the nvidia backend's: loaded only then.
    if wanted_backends(argv)("mps-control-daemon"):
        add_mps_control_daemon(sub)
    # In this order in --help and the command-line reference page.
    add_demo_command(sub)
    add_inspect_command(sub)
    add_operator_commands(sub)
    add_kubelet_command(sub)
    add_conformance_command(sub)
    return parser


# -- running a command ---------------------------------------------------------------


def _run_inspect(args: argparse.Namespace) -> int:
    from accel_plugins.inspector.command import inspect_plugin, render_json, render_text
    from accel_plugins.metrics.address import parse_address

    report = asyncio.run(
        inspect_plugin(
            args.socket,
            allocate=args.allocate,
            timeout=args.timeout,
            pre_start=args.pre_start,
            node=args.node_name,
            metrics=parse_address(args.metrics_address),
        )
    )
    print(render_json(report) if args.json else render_text(report))
    return 1 if report.pre_start_failed else 0


def _run_kubelet(args: argparse.Namespace) -> int:
    from accel_plugins.kubelet_emulator import serve as serve_kubelet

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
    from accel_plugins.kubelet_emulator.admission import admitting

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


def _run_mps_control_daemon(args: argparse.Namespace) -> int:
    from accel_plugins.backends.nvidia.mps.mps_command import OPTIONS, run

    options = {o.dest: getattr(args, o.dest) for o in OPTIONS}
    if not options["simulate"] and missing_modules(["pynvml"]):
        fatal("accel-plugins: mps-control-daemon needs pynvml: pip install 'accel-plugins[nvidia]'")
        return EXIT_CONFIG
    return run(MappingProxyType(options), MappingProxyType(dict(os.environ)))


def _run_cordon(args: argparse.Namespace) -> int:
    from accel_plugins.runtime.cordon import cordon

    cordon(args.state_dir, args.device, args.reason)
    print(f"cordoned {args.device} ({args.reason}) in {args.state_dir}")
    return 0


def _run_uncordon(args: argparse.Namespace) -> int:
    from accel_plugins.runtime.cordon import uncordon

    if not uncordon(args.state_dir, args.device):
        print(f"{args.device} was not cordoned in {args.state_dir}", file=sys.stderr)
        return 1
    print(f"uncordoned {args.device} in {args.state_dir}")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    try:
        from accel_plugins.demo.run import run_demo
    except ModuleNotFoundError as exc:  # the demo runs both vendors' backends
        if exc.name not in ("pynvml", "pyudev"):
            raise
        print(
            f"accel-plugins: demo needs {exc.name}, which is not installed: "
            "pip install 'accel-plugins[all]'",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    from accel_plugins.util.termstyle import wants_color

    color = wants_color(args.color, sys.stdout, os.environ)
    return asyncio.run(run_demo(once=args.once, out=sys.stdout, color=color))


def _run_conformance(args: argparse.Namespace) -> int:
    if missing_modules(["lightkube"]):
        fatal("accel-plugins dra-conformance needs lightkube: pip install 'accel-plugins[dra]'")
        return EXIT_CONFIG
    from accel_plugins.conformance.command import run_command

    return run_command(args)


def _run_migrate(args: argparse.Namespace) -> int:
    if missing_modules(["lightkube"]):
        fatal("accel-plugins migrate needs lightkube: pip install 'accel-plugins[dra]'")
        return EXIT_CONFIG
    from accel_plugins.switch.migrate import run_command

    return run_command(args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    backends = installed_backends(wanted_backends(argv))
    chosen = backends.get(chosen_command(argv) or "")
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
        "cordon": _run_cordon,
        "uncordon": _run_uncordon,
        "migrate": _run_migrate,
        "dra-conformance": _run_conformance,
    }
    prefix = f"accel-plugins {args.command}"
    try:
        command = backends[args.command].command if args.command in backends else None
        if command is not None:
            return run_backend(args.command, command, args)
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
