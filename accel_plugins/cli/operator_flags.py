"""The operator's commands on a node: ``cordon``, ``uncordon`` and ``migrate``.

Apart from the plugins' own flags (:mod:`accel_plugins.cli.flags`), and built only
when the whole command line is: a plugin starting never pays for them.
"""

from __future__ import annotations

from typing import Any

from accel_plugins.cli.flags import KUBELET_APIS, add_logging_flags, add_state_dir_flag
from accel_plugins.util.flags import add_flag


def add_operator_commands(sub: Any) -> None:
    """The subcommands an operator runs by hand (or through ``kubectl exec``)."""
    p = sub.add_parser(
        "cordon",
        help="take a device out of service on this node, in both modes, until uncordoned",
    )
    p.add_argument("device", help="a device ID as ListAndWatch shows it, or a DRA device name")
    p.add_argument("--reason", required=True, help="why (one line, shown in every channel)")
    add_state_dir_flag(p)
    add_logging_flags(p)
    p = sub.add_parser("uncordon", help="put a device cordoned with 'cordon' back in service")
    p.add_argument("device", help="the device as it was cordoned")
    add_state_dir_flag(p)
    add_logging_flags(p)
    _add_migrate(sub)


def _add_migrate(sub: Any) -> None:
    summary = "move a node between the device-plugin and the DRA mode (docs/migration.md)"
    p = sub.add_parser(
        "migrate",
        help=summary,
        description=f"{summary}. Exit codes: 0 labelled (with --wait: done), 2 bad "
        "arguments or no kubeconfig, 3 no such node, 4 API server refused or unreachable, "
        "5 --wait timed out.",
    )
    p.add_argument("node", metavar="NODE", help="the node to move")
    p.add_argument("--to", required=True, choices=KUBELET_APIS, help="the mode to move it to")
    p.add_argument(
        "--wait",
        action="store_true",
        help="report progress until the old mode holds nothing and the new one publishes",
    )
    p.add_argument(
        "--timeout", type=float, default=600.0, help="with --wait: give up after S seconds"
    )
    add_flag(
        p,
        "--kubeconfig",
        default="",
        env=("KUBECONFIG",),
        metavar="FILE",
        help="the API server's kubeconfig (default: $KUBECONFIG, else the pod's service account)",
    )
    p.add_argument(
        "--label",
        default="accel-plugins.io/kubelet-api",
        help="the node label the chart splits on (kubeletApiSwitch.nodeLabel)",
    )
    p.add_argument(
        "--domain",
        action="append",
        default=None,
        help="resource domain of the device-plugin resources (repeatable; default nvidia.com)",
    )
    p.add_argument(
        "--driver",
        action="append",
        default=None,
        help="DRA driver whose slices and claims count (repeatable; default any)",
    )
    add_logging_flags(p)
