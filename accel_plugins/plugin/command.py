"""How a backend becomes an ``accel-plugins <name>`` subcommand.

An installed package names a :class:`BackendCommand` in the entry-point group
``accel_plugins.backends``; the CLI adds the common flags (plugin dir, kubelet
socket, metrics, logs) and the command's own :class:`Option` list, each with an
``ACCEL_PLUGINS_<FLAG>`` environment twin, then calls ``build`` once to
validate (a :class:`~accel_plugins.errors.ConfigError` exits 2 before any
socket is touched) and uses the returned factory for every (re)start.

The module that defines the command must stay cheap to import: ``accel-plugins
--help`` loads every installed command to list it. Import hardware libraries
inside ``build``, and name them in ``requires`` so a missing one is reported as
the pip extra to install rather than a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from accel_plugins.util.flags import env_name

if TYPE_CHECKING:
    from accel_plugins.plugin.backend import Backend

ENTRY_POINT_GROUP = "accel_plugins.backends"
# Where DRA driver names of backends without their own live (<command>.accel-plugins.io).
DEFAULT_DRA_DOMAIN = "accel-plugins.io"

_FLAG_RE = re.compile(r"--[a-z0-9][a-z0-9-]*")

InUse = Callable[[str], Collection[str] | None]
RefreshInUse = Callable[[], Awaitable[None]]
"""resource -> IDs of the devices pods hold now, or None when the kubelet cannot say."""


@dataclass(frozen=True, slots=True)
class Option:
    """One flag of a backend's subcommand, e.g. ``Option("--config", "devices file")``.

    Its value is read from the command line, else from ``ACCEL_PLUGINS_<FLAG>``,
    else from the extra ``env`` names (vendor spellings such as ``MIG_STRATEGY``),
    else ``default``. ``type`` converts the text (raise ValueError to refuse it;
    its message is shown); :func:`accel_plugins.util.flags.parse_bool` makes a
    boolean flag that also works bare (``--pass-device-specs``). ``choices``
    are compared with the converted value.
    """

    flag: str
    help: str
    default: Any = None
    type: Callable[[str], Any] = str
    choices: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    metavar: str | None = None
    aliases: tuple[str, ...] = ()
    """Other spellings of the flag (a vendor's own names, ``--driver-root``); same value."""
    repeat: bool = False
    """The flag may be given many times (``--device A --device B``); its value is then the
    tuple of the converted values in order, ``default`` (a tuple) when none is given. Its
    environment twins hold a YAML list, one item per value (an item that is not a string is
    passed on as its JSON text); values on the command line replace that list."""

    def __post_init__(self) -> None:
        for flag in (self.flag, *self.aliases):
            if not _FLAG_RE.fullmatch(flag):
                raise ValueError(f"option {flag!r}: flags are spelled --lower-case-name")
        if self.repeat and not isinstance(self.default, tuple):
            raise ValueError(f"option {self.flag!r}: a repeated option's default is a tuple")

    @property
    def dest(self) -> str:
        """The key of this option in :attr:`BackendContext.options` (``--dev-root`` → dev_root)."""
        return self.flag[2:].replace("-", "_")

    @property
    def env_names(self) -> tuple[str, ...]:
        """The variables read when the flag is absent, first set wins: ours, then ``env``."""
        return (env_name(self.flag), *self.env)


@dataclass(frozen=True, slots=True)
class BackendContext:
    """What the command line hands a backend's ``build``."""

    # Option values by Option.dest, already converted and defaulted.
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # Which devices pods hold, from the kubelet's PodResources API (None: no API).
    in_use: InUse | None = None
    # Ask the kubelet again now; ``in_use`` answers from what it said. A backend awaits
    # it before deciding about a device that just vanished: ``in_use`` may answer from a
    # list taken before a pod got the device.
    refresh_in_use: RefreshInUse | None = None
    # The environment the process was started with (vendor variables beyond the flags).
    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The kubelet API served: "device-plugin" or "dra". A backend may answer each its own
    # way (NVIDIA: self-contained CDI devices under DRA, as NVIDIA's DRA driver does).
    kubelet_api: str = "device-plugin"
    # Where the mode writes its CDI specs (DRA's claim specs; None in device-plugin
    # mode): a backend that writes specs of its own puts them beside, by default.
    cdi_spec_dir: str | None = None


BackendFactory = Callable[[], "Backend"]
"""Builds a fresh backend: at start, after a crash, and on SIGHUP (re-reading config)."""


@dataclass(frozen=True, slots=True)
class BackendCommand:
    """A backend as the ``accel-plugins`` command line sees it.

    ``build`` validates the options and any configuration now, raising
    ConfigError for bad input, and returns the factory the manager calls.
    ``requires`` lists top-level modules the backend imports (``pynvml``);
    when one is missing the command exits 2 naming ``pip install
    'accel-plugins[<extra>]'`` (or ``install`` when given, for third parties).
    ``config_files`` names the options (by flag) whose value is a file the
    factory reads: when its content changes the backend is rebuilt from it
    without a restart, as on SIGHUP. ``dra_driver_name`` is the default of
    ``--dra-driver-name`` (a DNS subdomain; empty: ``<command>.accel-plugins.io``),
    the driver name claims and DeviceClasses select in ``--kubelet-api dra``.
    ``common_aliases`` gives common flags other spellings in this command only, as
    ``{"--plugin-dir": ("--plugin-directory",)}``: a vendor's own names, so its
    DaemonSet's arguments run unchanged.
    """

    summary: str
    build: Callable[[BackendContext], BackendFactory]
    options: tuple[Option, ...] = ()
    requires: tuple[str, ...] = ()
    extra: str = ""
    install: str = ""
    config_files: tuple[str, ...] = ()
    dra_driver_name: str = ""
    # hash=False: a mapping cannot be hashed, and a command stays usable as a key.
    common_aliases: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )

    def __post_init__(self) -> None:
        dests = [option.dest for option in self.options]
        twice = sorted({dest for dest in dests if dests.count(dest) > 1})
        if twice:
            raise ValueError(f"options given twice: {', '.join(twice)}")
        flags = {option.flag for option in self.options}
        unknown = sorted(set(self.config_files) - flags)
        if unknown:
            raise ValueError(f"config_files names no option: {', '.join(unknown)}")
        for flag in (*self.common_aliases, *(a for v in self.common_aliases.values() for a in v)):
            if not _FLAG_RE.fullmatch(flag):
                raise ValueError(f"common_aliases {flag!r}: flags are spelled --lower-case-name")
        spelled = {f for option in self.options for f in (option.flag, *option.aliases)}
        clash = sorted(spelled & {a for v in self.common_aliases.values() for a in v})
        if clash:
            raise ValueError(f"common_aliases spell options of the command: {', '.join(clash)}")

    def default_dra_driver_name(self, command: str) -> str:
        """The DRA driver name when ``--dra-driver-name`` is not given."""
        return self.dra_driver_name or f"{command}.{DEFAULT_DRA_DOMAIN}"

    def install_hint(self) -> str:
        """The command that installs what ``requires`` names."""
        if self.install:
            return self.install
        if self.extra:
            return f"pip install 'accel-plugins[{self.extra}]'"
        return f"pip install {' '.join(self.requires)}"
