"""The `accel-plugins` command: one entry point, a subcommand per job.

Vendor modules are imported only for their own subcommand, so a running
plugin pays the memory of one backend, not all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

# gRPC core prints an INFO line for every connection the kubelet drops (each
# kubelet restart); operators want warnings and errors only. This must run
# before grpc is first imported, which the project imports below do.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


from accel_plugins import __version__
from accel_plugins.errors import AccelPluginsError, ConfigError
from accel_plugins.flags import add_flag
from accel_plugins.logs import LOG_FORMATS, LOG_LEVELS, setup_logging
from accel_plugins.metrics import DEFAULT_METRICS_ADDRESS, instrumented_manager, parse_address
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.manager import DEFAULT_PLUGIN_DIR, ManagerSettings
from accel_plugins.plugin.podresources import DEFAULT_POD_RESOURCES_SOCKET, PodResourcesCache

log = logging.getLogger("accel_plugins")

VENDORS = {
    "generic": "accel_plugins.backends.generic.cli",
    "nvidia": "accel_plugins.backends.nvidia.cli",
}
SUBCOMMANDS = ("generic", "nvidia", "demo", "inspect", "kubelet")
EXIT_CONFIG = 2


class VendorCli(Protocol):
    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def backend_factory(self, args: argparse.Namespace) -> Callable[[], Backend]: ...


def _vendor(name: str) -> VendorCli:
    module: VendorCli = importlib.import_module(VENDORS[name])
    return module


def _add_logging_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--log-format", default="text", choices=LOG_FORMATS, help="log line format")
    add_flag(parser, "--log-level", default="info", choices=LOG_LEVELS, help="least severe level")


def _add_kubelet_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--plugin-dir",
        type=Path,
        default=DEFAULT_PLUGIN_DIR,
        help="directory of the kubelet's device plugin sockets",
    )
    add_flag(
        parser,
        "--kubelet-socket",
        type=Path,
        default=None,
        help="the kubelet's registration socket (default: <plugin-dir>/kubelet.sock)",
    )


def _add_pod_resources_flag(parser: argparse.ArgumentParser) -> None:
    add_flag(
        parser,
        "--pod-resources-socket",
        type=Path,
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
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in SUBCOMMANDS else None
    return None


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accel-plugins",
        description="Kubernetes device plugins for GPUs and /dev hardware.",
    )
    parser.add_argument("--version", action="version", version=f"accel-plugins {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _chosen(argv)

    for vendor, summary in (
        ("generic", "expose /dev nodes (udev, path globs) as extended resources"),
        ("nvidia", "expose NVIDIA GPUs and MIG devices through NVML"),
    ):
        p = sub.add_parser(vendor, help=summary, description=summary)
        _add_kubelet_flags(p)
        _add_metrics_flag(p)
        _add_pod_resources_flag(p)
        _add_logging_flags(p)
        if chosen == vendor:
            _vendor(vendor).add_arguments(p)

    p = sub.add_parser("demo", help="walk through a plugin and an emulated kubelet, no GPU needed")
    p.add_argument("--once", action="store_true", help="exit after the walkthrough")
    _add_logging_flags(p)

    p = sub.add_parser("inspect", help="query any device plugin socket like the kubelet would")
    p.add_argument("socket", type=Path, help="the plugin's unix socket")
    p.add_argument(
        "--allocate", type=int, default=0, metavar="N", help="dry-run an allocation of N devices"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the plugin")
    _add_logging_flags(p)

    p = sub.add_parser("kubelet", help="run the kubelet emulator (for local development)")
    _add_kubelet_flags(p)
    add_flag(
        p,
        "--pod-resources-socket",
        type=Path,
        default=None,
        help="also serve the PodResources API on this socket",
    )
    _add_logging_flags(p)
    return parser


async def serve(
    factory: Callable[[], Backend],
    settings: ManagerSettings,
    metrics_address: tuple[str, int] | None = None,
    pod_resources: PodResourcesCache | None = None,
) -> int:
    """Run the manager until SIGTERM/SIGINT (exit 0); SIGHUP reloads the configuration.

    Metrics go into a registry of this call's own; ``pod_resources`` names the
    pods holding each device on the device and GPU series.
    """
    manager, metrics = instrumented_manager(factory, settings, pod_resources)
    if pod_resources is not None:
        pod_resources.touch()  # the first scrape then has pods to name
    if metrics_address is not None:
        try:
            await metrics.start(*metrics_address)
        except OSError as exc:
            raise AccelPluginsError(f"cannot serve metrics on {metrics_address}: {exc}") from exc
    loop = asyncio.get_running_loop()
    stopping: set[asyncio.Task[None]] = set()

    def stop() -> None:
        log.info("stopping")
        stopping.add(asyncio.ensure_future(manager.stop()))

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGHUP, manager.reload)
    # Modules, protobuf descriptors and gRPC state live as long as the process:
    # moved out of the collector's reach, full collections stay short.
    gc.collect()
    gc.freeze()
    try:
        await manager.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        await metrics.stop()
    return 0


def _run_vendor(name: str, args: argparse.Namespace) -> int:
    metrics_address = parse_address(args.metrics_address)
    # Backends learn which devices pods hold through args.in_use (they never
    # speak gRPC themselves); None answers mean "unknown right now".
    pod_resources = PodResourcesCache(args.pod_resources_socket)
    args.in_use = pod_resources.in_use
    factory = _vendor(name).backend_factory(args)  # validates config before any socket work
    settings = ManagerSettings(plugin_dir=args.plugin_dir, kubelet_socket=args.kubelet_socket)
    return asyncio.run(serve(factory, settings, metrics_address, pod_resources))


def _run_inspect(args: argparse.Namespace) -> int:
    from accel_plugins.inspect import inspect_plugin, render_json, render_text

    report = asyncio.run(inspect_plugin(args.socket, allocate=args.allocate, timeout=args.timeout))
    print(render_json(report) if args.json else render_text(report))
    return 0


def _run_kubelet(args: argparse.Namespace) -> int:
    from accel_plugins.kubelet import serve as serve_kubelet

    plugin_dir: Path = args.plugin_dir
    socket: Path | None = args.kubelet_socket
    if socket is not None and socket.parent != plugin_dir:
        # Plugins name their endpoint relative to the kubelet socket's directory.
        raise ConfigError("--kubelet-socket", "", f"{socket} must be inside --plugin-dir")

    def echo(line: str) -> None:
        print(line, flush=True)

    async def main() -> None:
        task = asyncio.ensure_future(
            serve_kubelet(
                plugin_dir,
                pod_resources_socket=args.pod_resources_socket,
                on_event=echo,
                socket_name=socket.name if socket else "kubelet.sock",
            )
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from accel_plugins.demo import run_demo

    return asyncio.run(run_demo(once=args.once, out=sys.stdout))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    setup_logging(args.log_format, args.log_level)
    runners: dict[str, Callable[[argparse.Namespace], int]] = {
        "inspect": _run_inspect,
        "kubelet": _run_kubelet,
        "demo": _run_demo,
    }
    try:
        if args.command in VENDORS:
            return _run_vendor(args.command, args)
        return runners[args.command](args)
    except ConfigError as exc:
        print(f"accel-plugins: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except AccelPluginsError as exc:
        print(f"accel-plugins: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
