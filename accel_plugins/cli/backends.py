"""Which backends are installed: the entry points of ``accel_plugins.backends``.

Each is listed by name and loaded only when the command line needs it (the
one being run, or all for ``--help``); a loaded one is checked against the
common flags before it gets a subcommand. A broken one is kept with the
reason, so ``accel-plugins <name>`` can say why it cannot run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from accel_plugins.plugin.command import ENTRY_POINT_GROUP, BackendCommand
from accel_plugins.util.entrypoints import EntryPointRef, entry_points

BUILTINS = ("demo", "inspect", "kubelet", "mps-control-daemon", "dra-conformance")

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
        "dra_device_taints",
        "dra_shared_devices",
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


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the top level takes no option with a value)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def wanted_backends(argv: Sequence[str]) -> Callable[[str], bool]:
    """Which backends to load: the one being run, or all for the command list of --help."""
    chosen = chosen_command(argv)
    if chosen is not None:
        return lambda name: name == chosen
    if "--version" in argv and not {"-h", "--help"} & set(argv):
        return lambda name: False
    return lambda name: True
