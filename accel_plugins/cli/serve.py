"""Running a backend: from its parsed flags to a served mode, the typed composition root.

The flags pick a :class:`~accel_plugins.runtime.mode.Mode` (the device plugin or the
DRA driver) and build its settings; the mode serves the backend until a signal.
``serve`` (the device-plugin mode's process) stays importable from here.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import logging
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

# gRPC core prints an INFO line for every connection the kubelet drops (each
# kubelet restart); operators want warnings and errors only. This must run
# before grpc is first imported (on the run path, below).
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from accel_plugins.deviceplugin.run import DevicePluginMode
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.command import BackendCommand, BackendContext
from accel_plugins.util.logs import fatal

if TYPE_CHECKING:
    from accel_plugins.dra.driver import DraSettings
    from accel_plugins.runtime.mode import Mode
    from accel_plugins.switch.model import SwitchSettings
    from accel_plugins.switch.wait import Handover

log = logging.getLogger("accel_plugins")

EXIT_CONFIG = 2


def missing_modules(modules: Iterable[str]) -> list[str]:
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


def run_backend(name: str, command: BackendCommand, args: argparse.Namespace) -> int:
    missing = missing_modules(command.requires)
    if missing:
        return _not_installed(name, command, missing)
    if args.registration == "plugin-watcher" and args.plugins_registry_dir == args.plugin_dir:
        # Both sockets of a resource carry its name: one directory cannot hold both.
        raise ConfigError(
            "--plugins-registry-dir", "", f"{args.plugin_dir} must differ from --plugin-dir"
        )
    dra = _dra_settings(args) if args.kubelet_api == "dra" else None
    from accel_plugins.kube.rate_limit import RateLimit, set_process_limit
    from accel_plugins.metrics.address import parse_address
    from accel_plugins.runtime.backoff import set_process_jitter

    try:
        set_process_limit(RateLimit(args.kube_api_qps, args.kube_api_burst))
    except ValueError as exc:
        raise ConfigError("--kube-api-qps/--kube-api-burst", "", str(exc)) from exc
    try:
        set_process_jitter(args.kube_api_retry_jitter)
    except ValueError as exc:
        raise ConfigError("--kube-api-retry-jitter", "", str(exc)) from exc
    from accel_plugins.runtime.cordon import Cordons
    from accel_plugins.runtime.podresources import PodResourcesCache

    metrics_address = parse_address(args.metrics_address)
    # Backends learn which devices pods hold through ctx.in_use (they never
    # speak gRPC themselves); None answers mean "unknown right now".
    pod_resources = PodResourcesCache(args.pod_resources_socket)
    ctx = BackendContext(
        options=MappingProxyType({o.dest: getattr(args, o.dest) for o in command.options}),
        in_use=pod_resources.in_use,
        refresh_in_use=pod_resources.refresh,
        environ=MappingProxyType(dict(os.environ)),
        kubelet_api=args.kubelet_api,
        cdi_spec_dir=str(args.dra_cdi_spec_dir) if dra is not None else None,
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
    handover = _handover(name, args, ctx)
    mode: Mode
    if dra is not None:
        from accel_plugins.dra.run import DraMode

        gc.enable()  # off since the console script started (accel_plugins.launch)
        mode = DraMode(
            dra,
            args.kubeconfig or None,
            metrics_address,
            config_files,
            device_taints=args.dra_device_taints,
            shared_devices=args.dra_shared_devices,
            rolling_update=args.dra_rolling_update,
            cordons=Cordons(args.state_dir),
            handover=handover,
            switch=_switch_settings(args),
        )
    else:  # the device-plugin modules load in this mode only (issue 34)
        from accel_plugins.deviceplugin.manager import ManagerSettings

        settings = ManagerSettings(
            plugin_dir=args.plugin_dir,
            kubelet_socket=args.kubelet_socket,
            registration=args.registration,
            plugins_registry_dir=args.plugins_registry_dir,
        )
        mode = DevicePluginMode(
            settings,
            metrics_address,
            pod_resources,
            config_files,
            args.node_name,
            args.kubeconfig or None,
            Cordons(args.state_dir),
            handover,
        )
    return asyncio.run(mode.serve(factory))


def _switch_settings(args: argparse.Namespace) -> SwitchSettings | None:
    if not args.kubelet_api_switch_label:
        return None
    from accel_plugins.switch.model import SwitchSettings

    return SwitchSettings(args.kubelet_api_switch_label, args.kubelet_api_default)


def _handover(name: str, args: argparse.Namespace, ctx: BackendContext) -> Handover | None:
    """With the switch on, what this plugin waits on before publishing: the other mode of
    our resources (those under the backend's domain: ``--domain``, or nvidia.com)."""
    if not args.kubelet_api_switch_label:
        return None
    from accel_plugins.switch.probes import DevicePluginSide, DraSide
    from accel_plugins.switch.wait import Handover, HandoverState, Side

    if args.kubelet_api == "dra":
        domain = str(ctx.options.get("domain") or RESOURCE_DOMAINS.get(name, name))
        side: Side = DevicePluginSide(args.plugin_dir, args.pod_resources_socket, [domain])
    else:
        side = DraSide(args.kubelet_plugins_dir, args.dra_driver_name)
        if importlib.util.find_spec("lightkube") is not None and args.node_name:
            from accel_plugins.switch.slices import AllSides, SliceSide

            slices = SliceSide(args.node_name, args.dra_driver_name, args.kubeconfig or None)
            side = AllSides([side, slices])
    return Handover(side, HandoverState(args.kubelet_api))


# What a pod UID may hold, since it becomes part of socket file names.
POD_UID = re.compile(r"[A-Za-z0-9-]{1,64}")

# A backend's resource domain where it has no --domain flag.
RESOURCE_DOMAINS = {"nvidia": "nvidia.com"}


def _dra_settings(args: argparse.Namespace) -> DraSettings:
    """The DRA driver's settings (ConfigError, exit 2, for a bad name or no node name).

    Only here is accel_plugins.dra imported: device-plugin mode never loads it.
    """
    from accel_plugins.dra.driver import DraSettings

    if args.pod_uid and not POD_UID.fullmatch(args.pod_uid):
        raise ConfigError("--pod-uid", "", f"{args.pod_uid!r}: a pod UID has letters, digits, '-'")
    if args.dra_rolling_update == "on" and not args.pod_uid:
        raise ConfigError("--dra-rolling-update", "", "on needs --pod-uid (env POD_UID)")
    return DraSettings(
        driver_name=args.dra_driver_name,
        node_name=args.node_name,
        kubelet_plugins_dir=args.kubelet_plugins_dir,
        plugins_registry_dir=args.plugins_registry_dir,
        cdi_spec_dir=args.dra_cdi_spec_dir,
        instance_uid=args.pod_uid if args.dra_rolling_update != "off" else "",
    )
