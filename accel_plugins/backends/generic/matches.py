"""What each entry of a generic config matches on this node.

A path or glob that matches nothing serves no device, and the kubelet says
nothing about a resource it never heard of: the backend warns once per such
entry when it is built (start, reload), and ``accel-plugins generic
--check-config`` prints what every entry matches, exiting 0 when each matches
something and 2 otherwise. Entries are named as a config error names them:
the file and ``devices[i]`` (or ``--device[i]`` for squat's flags).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from accel_plugins.backends.generic.config import DEVICE_FLAG, GenericConfig

# --check-config's exit status when an entry matches nothing (a configuration problem).
UNMATCHED_EXIT = 2


@dataclass(frozen=True, slots=True)
class GroupMatch:
    """One group of an entry: its kind and the host paths of each unit it found."""

    group: int
    kind: str  # "paths", "usb" or "udev", as the config spells the group
    units: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class EntryMatch:
    """One ``devices`` entry and what its groups found."""

    index: int
    name: str
    groups: tuple[GroupMatch, ...]

    @property
    def matched(self) -> bool:
        return any(group.units for group in self.groups)


def entry_label(config: GenericConfig, entry: EntryMatch) -> str:
    """``/etc/x.yaml: devices[1] (video)`` or ``--device[0] (video)``."""
    if config.source == DEVICE_FLAG:
        return f"{DEVICE_FLAG}[{entry.index}] ({entry.name})"
    return f"{config.source}: devices[{entry.index}] ({entry.name})"


def unmatched_message(config: GenericConfig, entry: EntryMatch) -> str:
    return (
        f"{entry_label(config, entry)}: matches nothing on this node; its resource has no "
        "devices until a match appears"
    )


def report(
    config: GenericConfig, entries: Sequence[EntryMatch], resource_of: dict[str, str]
) -> str:
    """--check-config's text: each entry, its resource, and each group's host paths."""
    lines: list[str] = []
    for entry in entries:
        if not entry.matched:
            lines.append(unmatched_message(config, entry))
            continue
        count = sum(len(group.units) for group in entry.groups)
        lines.append(
            f"{entry_label(config, entry)}: {resource_of[entry.name]}, "
            f"{count} unit{'s' if count != 1 else ''} (before count replicas)"
        )
        for group in entry.groups:
            found = len(group.units)
            lines.append(f"  groups[{group.group}] ({group.kind}): {found} found")
            lines += [f"    {', '.join(paths)}" for paths in group.units]
    return "\n".join(lines) + "\n"


def exit_status(entries: Sequence[EntryMatch]) -> int:
    return 0 if all(entry.matched for entry in entries) else UNMATCHED_EXIT
