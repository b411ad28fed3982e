"""The entry points of installed distributions, read without importlib.metadata.

``accel-plugins <backend>`` looks up one entry point at every start. Importing
importlib.metadata (and through it email, zipfile, csv) costs about 18 ms, a
quarter of a bare Python gRPC process's start-up, for a lookup that only
needs each distribution's ``entry_points.txt``. This reads those files from
the ``*.dist-info`` and ``*.egg-info`` folders on ``sys.path``, first
distribution of a name wins, as importlib.metadata does. A zip archive on the
path (which this reader does not open) sends the lookup to importlib.metadata.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_INFO_SUFFIXES = (".dist-info", ".egg-info")
_SECTION = re.compile(r"\[\s*([^\]]+?)\s*\]")


@dataclass(frozen=True, slots=True)
class EntryPointRef:
    """One entry point: ``name = value`` in ``group``, from distribution ``dist`` (name version)."""

    name: str
    value: str
    group: str
    dist: str

    def load(self) -> object:
        """Import ``module:attr.path`` (the attribute part is optional)."""
        module_name, _, attrs = self.value.partition(":")
        target: object = importlib.import_module(module_name.strip())
        for attr in filter(None, attrs.strip().split(".")):
            target = getattr(target, attr)
        return target


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_of(folder: str) -> tuple[str, str]:
    """``acme_widget-0.1.dist-info`` -> (``acme_widget``, ``0.1``); egg-info may lack a version."""
    stem = folder.rsplit(".", 1)[0]
    name, _, version = stem.partition("-")
    return name, version.split("-", 1)[0]


def parse(text: str, dist: str) -> list[EntryPointRef]:
    """The entry points of one ``entry_points.txt`` (INI: ``[group]`` then ``name = value``)."""
    found: list[EntryPointRef] = []
    group = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        section = _SECTION.fullmatch(line)
        if section is not None:
            group = section.group(1)
        elif "=" in line and group:
            name, _, value = line.partition("=")
            found.append(EntryPointRef(name.strip(), value.strip(), group, dist))
    return found


def _from_metadata(group: str, path: Sequence[str]) -> list[EntryPointRef]:
    from importlib.metadata import distributions

    seen: set[str] = set()
    found: list[EntryPointRef] = []
    for dist in distributions(path=list(path)):
        key = _normalized(dist.name)
        if key not in seen:
            seen.add(key)
            where = f"{dist.name} {dist.version}"
            found += (EntryPointRef(e.name, e.value, e.group, where) for e in dist.entry_points)
    return [e for e in found if e.group == group]


def entry_points(group: str, path: Sequence[str] | None = None) -> list[EntryPointRef]:
    """Every entry point of ``group`` on ``path`` (default sys.path), in path order."""
    entries = sys.path if path is None else path
    if any(os.path.isfile(entry) for entry in entries if entry):
        return _from_metadata(group, entries)  # a zip on the path: let importlib.metadata open it
    seen: set[str] = set()
    found: list[EntryPointRef] = []
    for entry in entries:
        found += _scan(entry or ".", group, seen)
    return found


def _scan(directory: str, group: str, seen: set[str]) -> Iterable[EntryPointRef]:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for folder in names:
        if not folder.endswith(_INFO_SUFFIXES):
            continue
        name, version = _dist_of(folder)
        key = _normalized(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            with open(os.path.join(directory, folder, "entry_points.txt"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        wanted = [e for e in parse(text, "") if e.group == group]
        if wanted:
            dist = _display_name(os.path.join(directory, folder)) or f"{name} {version}".strip()
            yield from (EntryPointRef(e.name, e.value, e.group, dist) for e in wanted)


def _display_name(info: str) -> str:
    """``Name Version`` as the distribution's metadata spells them (for messages)."""
    fields: dict[str, str] = {}
    for metadata in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(info, metadata), encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    key, _, value = line.partition(":")
                    if key in ("Name", "Version"):
                        fields.setdefault(key, value.strip())
        except OSError:
            continue
        break
    return " ".join(fields[k] for k in ("Name", "Version") if k in fields)
