"""The built-in commands' parsers: ``demo``, ``inspect``, ``kubelet``, ``mps-control-daemon``
and ``dra-conformance``.

These are the commands in :data:`accel_plugins.cli.backends.BUILTINS`. They reuse
some of the plugins' flag groups (:mod:`accel_plugins.cli.flags`) but are built
only when the whole command line is (:func:`accel_plugins.cli.main.build_parser`),
so a plugin starting never imports this module.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from accel_plugins.cli.flags import (
    DEMO_COLORS,
    TOPOLOGY_POLICIES,
    absolute_path,
    add_kubelet_flags,
    add_logging_flags,
    add_node_flag,
    add_options,
    socket_path,
)
from accel_plugins.util.flags import add_flag


def add_demo_command(sub: Any) -> None:
    p = sub.add_parser("demo", help="walk through a plugin and an emulated kubelet, no GPU needed")
    p.add_argument("--once", action="store_true", help="exit after the walkthrough")
    p.add_argument(
        "--color",
        choices=DEMO_COLORS,
        default="auto",
        help="ANSI colours: auto (a terminal, unless NO_COLOR is set), always, never",
    )
    add_logging_flags(p)


def add_inspect_command(sub: Any) -> None:
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
    add_node_flag(p)
    add_logging_flags(p)


def add_kubelet_command(sub: Any) -> None:
    p = sub.add_parser("kubelet", help="run the kubelet emulator (for local development)")
    add_kubelet_flags(p)
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


def _add_admission_flags(parser: argparse.ArgumentParser) -> None:
    """--admit and what admitting needs: the emulator plays the device manager's part."""
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


def add_conformance_command(sub: Any) -> None:
    from accel_plugins.conformance.catalogue import check_list  # data only: --help stays light

    summary = "hold any vendor's DRA driver to the kubelet's contract (a conformance kit)"
    p = sub.add_parser(
        "dra-conformance",
        help=summary,
        description=f"{summary}. Exit 0 only when every required check passes.",
        epilog=check_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_flag(p, "--driver", default="", metavar="NAME", help="the DRA driver's name")
    add_flag(
        p,
        "--node",
        default="",
        env=("NODE_NAME",),
        metavar="NAME",
        help="the node the driver serves (empty: the host name)",
    )
    add_flag(
        p,
        "--plugins-registry-dir",
        type=absolute_path,
        default="/var/lib/kubelet/plugins_registry",
        metavar="DIR",
        help="where the driver's registration socket appears (the kubelet's plugins registry)",
    )
    add_flag(
        p,
        "--cdi-dir",
        type=absolute_path,
        default=("/etc/cdi", "/var/run/cdi"),
        repeat=True,
        metavar="DIR",
        help="where the driver writes CDI specs and a runtime reads them",
    )
    add_flag(
        p,
        "--driver-command",
        default="",
        metavar="CMD",
        help="start the driver with this command (split like a shell line, never run by one) "
        "so the kit can restart it and simulate a reboot; {kubeconfig}, {node}, {driver}, "
        "{registry}, {cdi_dir}, {boot_id_file} and {workdir} are filled in. Empty: the "
        "driver is already running",
    )
    add_flag(
        p,
        "--kubeconfig",
        default="",
        env=("KUBECONFIG",),
        metavar="FILE",
        help="the cluster's API server; empty: start etcd and kube-apiserver from "
        "$KUBEBUILDER_ASSETS for the run",
    )
    add_flag(
        p,
        "--kube-apiserver",
        default="kube-apiserver",
        metavar="NAME",
        help="without --kubeconfig: the API server binary in $KUBEBUILDER_ASSETS",
    )
    add_flag(
        p,
        "--apiserver-feature-gates",
        default="",
        metavar="G=true,...",
        help="without --kubeconfig: the API server's --feature-gates",
    )
    add_flag(
        p,
        "--apiserver-runtime-config",
        default="",
        metavar="G/V=true,...",
        help="without --kubeconfig: the API server's --runtime-config",
    )
    p.add_argument(
        "--sole-node",
        action="store_true",
        help="no other node runs this driver in the cluster: any slice of it for another node "
        "is a fault (implied when the kit starts the API server)",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="ID,...",
        help="run these checks (and those they need)",
    )
    p.add_argument(
        "--skip", action="append", default=[], metavar="ID,...", help="leave these checks out"
    )
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    add_flag(p, "--junit", default="", metavar="FILE", help="also write the results as JUnit XML")
    add_flag(
        p,
        "--workdir",
        default="",
        metavar="DIR",
        help="for the driver's log, boot ID file and kubeconfig (default: a new temp dir)",
    )
    add_flag(
        p,
        "--register-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds for the driver to register after a start",
    )
    add_flag(
        p,
        "--call-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds for one NodePrepareResources or NodeUnprepareResources",
    )
    add_flag(
        p,
        "--repair-timeout",
        type=float,
        default=70.0,
        metavar="S",
        help="seconds for slices to come back after the kubelet's wipe (kubeletplugin's "
        "drivers wait 30, or until a minute after the slice was last written)",
    )
    add_logging_flags(p)
