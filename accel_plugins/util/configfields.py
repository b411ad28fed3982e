"""Typed reads from a parsed configuration document; every failure is a ConfigError.

The generic config, the NVIDIA config and the simulated-node profiles walk
parsed YAML the same way: this value must be a mapping, a list, a string, a
boolean or an integer; keys the format does not know are refused (or noted);
a problem names the file, the field path (``devices[0].groups[1].count``) and
the reason. :class:`Fields` does that once, and each format keeps only its own
schema. :mod:`accel_plugins.util.yamlfile` reads the file; this module checks what
it holds.

The formats grew slightly different wording (``got a number`` in the generic
config, ``got 5`` in NVIDIA's), which operators and tests rely on, so each
picks a :class:`Wording`: :data:`REPR` (the default) or :data:`PLAIN`.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, TypeVar

from accel_plugins.errors import ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


def type_name(value: object) -> str:
    """``list``, ``NoneType``: how :data:`REPR` describes a value of the wrong shape."""
    return type(value).__name__


def plain_kind(value: object) -> str:
    """``a number``, ``nothing (null)``: how :data:`PLAIN` describes any wrong value."""
    if value is None:
        return "nothing (null)"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names |= {list: "a list", dict: "a mapping"}
    return names.get(type(value), type(value).__name__)


def _known_sorted(known: Collection[str]) -> str:
    return f"unknown field (known: {', '.join(sorted(known))})"


def _expected_one_of(known: Collection[str]) -> str:
    return f"unknown key (expected one of: {', '.join(known)})"


@dataclass(frozen=True, slots=True)
class Wording:
    """How one format's messages read; every message's skeleton is shared."""

    found: Callable[[object], str] = repr
    """A wrong scalar in ``expected true or false, got <found>``."""
    found_shape: Callable[[object], str] = type_name
    """A wrong container in ``expected a mapping, got <found_shape>``."""
    integer: str = "an integer"
    """The noun in ``expected <integer>, got ...``."""
    unknown: Callable[[Collection[str]], str] = _known_sorted
    """The reason given for an unknown key, from the keys the mapping may have."""
    string_keys: bool = False
    """Refuse non-string keys as such (``keys must be strings``); otherwise they are unknown."""


REPR = Wording()
"""``expected true or false, got 'yes'``; ``unknown field (known: <sorted keys>)``."""
PLAIN = Wording(
    found=plain_kind,
    found_shape=plain_kind,
    integer="a whole number",
    unknown=_expected_one_of,
    string_keys=True,
)
"""``expected true or false, got a string``; ``unknown key (expected one of: <keys>)``."""


class UnknownKeys(enum.Enum):
    """What :meth:`Fields.mapping` does with a key it does not know."""

    REFUSE = "refuse"
    """A ConfigError, so a typo never silently falls back to a default."""
    COLLECT = "collect"
    """Keep going; the key's field path is added to :attr:`Fields.ignored`."""
    WARN = "warn"
    """As COLLECT, and log a warning naming the file and the field."""


def at(where: str, key: object) -> str:
    """The field path of ``key`` inside ``where``: ``flags.plugin``, or ``key`` at the top."""
    return f"{where}.{key}" if where else str(key)


class Fields:
    """Typed reads of one document's values, each naming its field path on failure.

    ``where`` is the field path of the value being read; ``""`` is the document.
    """

    def __init__(
        self,
        source: str,
        *,
        wording: Wording = REPR,
        unknown: UnknownKeys = UnknownKeys.REFUSE,
    ) -> None:
        self.source = source
        self.wording = wording
        self.unknown = unknown
        self.ignored: list[str] = []
        """Field paths of unknown keys let through (COLLECT and WARN), in reading order."""

    def fail(self, where: str, reason: str) -> ConfigError:
        """The error to raise for the value at ``where``."""
        return ConfigError(self.source, where, reason)

    # -- containers --

    def mapping(
        self,
        value: object,
        where: str,
        known: Collection[str] | None = None,
        *,
        optional: bool = False,
    ) -> Mapping[str, object]:
        """``value`` as a mapping whose keys are all in ``known`` (any key when None).

        ``optional``: null (an absent section) reads as an empty mapping.
        """
        if value is None and optional:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {self.wording.found_shape(value)}")
        if known is not None:
            self.keys(value, where, known)
        return value

    def keys(self, data: Mapping[object, object], where: str, known: Collection[str]) -> None:
        """Check every key of ``data`` against ``known``, as the :class:`UnknownKeys` mode says."""
        for key in data:
            if self.wording.string_keys and not isinstance(key, str):
                raise self.fail(where, f"keys must be strings, got {key!r}")
            if key in known:
                continue
            path = at(where, key)
            if self.unknown is UnknownKeys.REFUSE:
                raise self.fail(path, self.wording.unknown(known))
            self.ignored.append(path)
            if self.unknown is UnknownKeys.WARN:
                log.warning("%s: %s: unknown field, ignored", self.source, path)

    def sequence(self, value: object, where: str) -> Sequence[object]:
        """``value`` as a list (a tuple too: built-in documents are Python literals)."""
        if not isinstance(value, list | tuple):
            raise self.fail(where, f"expected a list, got {self.wording.found_shape(value)}")
        return value

    # -- scalars --

    def string(self, value: object, where: str, *, empty: bool = True) -> str:
        """``value`` as a string; ``empty=False`` refuses ``""`` with the same message."""
        if not isinstance(value, str) or (not empty and not value):
            what = "a string" if empty else "a non-empty string"
            raise self.fail(where, f"expected {what}, got {self.wording.found(value)}")
        return value

    def boolean(self, value: object, where: str) -> bool:
        """``value`` as true or false; nothing else (``yes``, 1) counts."""
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {self.wording.found(value)}")
        return value

    def integer(
        self, value: object, where: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        """``value`` as an integer (not a boolean, not a float) within the bounds given."""
        if isinstance(value, bool) or not isinstance(value, int):
            found = self.wording.found(value)
            raise self.fail(where, f"expected {self.wording.integer}, got {found}")
        if minimum is not None and value < minimum:
            raise self.fail(where, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.fail(where, f"at most {maximum}, got {value}")
        return value

    def choice(self, value: object, where: str, choices: Sequence[str]) -> str:
        """``value`` when it is one of ``choices``."""
        if value not in choices:
            raise self.fail(where, f"{value!r} is not one of {', '.join(choices)}")
        return str(value)

    # -- optional fields --

    def optional(
        self,
        data: Mapping[str, object],
        key: str,
        where: str,
        read: Callable[Concatenate[object, str, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | None:
        """``data[key]`` read with ``read`` at ``where.key``; None when absent or null.

        ``optional(flags, "migStrategy", "flags", fields.choice, STRATEGIES)``.
        """
        value = data.get(key)
        if value is None:
            return None
        return read(value, at(where, key), *args, **kwargs)
