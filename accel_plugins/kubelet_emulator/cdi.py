"""What a CDI device gives a container, read from the CDI spec directories as a runtime does.

The kubelet hands a container runtime only qualified CDI names
(``vendor/class=name``); the runtime looks them up in its spec directories
(CDI's defaults: ``/etc/cdi`` and ``/var/run/cdi``, the later one winning for
a name found in both) and applies the device's ``containerEdits`` together
with the spec-wide ones. The emulator does the same lookup to print what a
container would get. Spec files are ``*.json`` and ``*.yaml``; an unreadable
or malformed file is skipped, as the CDI cache skips it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DEFAULT_SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))


@dataclass(frozen=True, slots=True)
class CdiEdits:
    """A CDI device's edits, spec-wide ones first; ``source`` is the spec file."""

    source: Path
    device_nodes: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    mounts: tuple[str, ...] = ()

    def lines(self, indent: str) -> list[str]:
        out = [f"{indent}from {self.source}"]
        for title, items in (
            ("device nodes", self.device_nodes),
            ("env", self.env),
            ("mounts", self.mounts),
        ):
            if items:
                out.append(f"{indent}{title}:")
                out += [f"{indent}  {item}" for item in items]
        return out


def split_name(qualified: str) -> tuple[str, str] | None:
    """``vendor/class=name`` as (kind, name); None when it is not a qualified name."""
    kind, eq, name = qualified.partition("=")
    if not eq or "/" not in kind or not name:
        return None
    return kind, name


def _load(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):  # UnicodeDecodeError is a ValueError
        return None
    return doc if isinstance(doc, dict) else None


def _edits(source: Path, parts: Iterable[object]) -> CdiEdits:
    nodes: list[str] = []
    env: list[str] = []
    mounts: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        for node in part.get("deviceNodes") or ():
            if isinstance(node, dict) and node.get("path"):
                host = node.get("hostPath") or node["path"]
                perms = node.get("permissions") or "rwm"
                nodes.append(f"{host} -> {node['path']} ({perms})")
        env += [e for e in part.get("env") or () if isinstance(e, str)]
        for mount in part.get("mounts") or ():
            if isinstance(mount, dict) and mount.get("containerPath"):
                options = ",".join(mount.get("options") or ())
                mounts.append(
                    f"{mount.get('hostPath', '')} -> {mount['containerPath']}"
                    + (f" ({options})" if options else "")
                )
    return CdiEdits(source, tuple(nodes), tuple(env), tuple(mounts))


def find_device(qualified: str, spec_dirs: Sequence[Path] = DEFAULT_SPEC_DIRS) -> CdiEdits | None:
    """The edits of ``qualified`` from the spec directories; None when no spec has it."""
    split = split_name(qualified)
    if split is None:
        return None
    kind, name = split
    found: CdiEdits | None = None
    for directory in spec_dirs:
        try:
            files = sorted(
                p for p in Path(directory).iterdir() if p.suffix in (".json", ".yaml", ".yml")
            )
        except OSError:
            continue
        for path in files:
            spec = _load(path)
            if spec is None or spec.get("kind") != kind:
                continue
            for device in spec.get("devices") or ():
                if isinstance(device, dict) and device.get("name") == name:
                    # A later directory overrides an earlier one, as in the CDI cache.
                    found = _edits(path, (spec.get("containerEdits"), device.get("containerEdits")))
    return found
