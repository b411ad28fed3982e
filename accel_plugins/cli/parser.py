"""The whole ``accel-plugins`` command line: which subcommands a given argv gets.

A plugin starting gets its own subcommand's parser alone, so start-up pays
neither for the other backends nor for the built-in and operator commands,
whose modules are imported only when the whole command line is built (issue
17). The flags themselves are :mod:`accel_plugins.cli.flags` (the backends'),
:mod:`accel_plugins.cli.builtin_flags` and :mod:`accel_plugins.cli.operator_flags`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from accel_plugins import __version__
from accel_plugins.cli.backends import (
    InstalledBackend,
    chosen_command,
    installed_backends,
    wanted_backends,
)
from accel_plugins.cli.flags import add_backend_command
from accel_plugins.plugin.command import ENTRY_POINT_GROUP


class CommandParser(argparse.ArgumentParser):
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
    return parser
