"""Which CDI devices the specs in a directory define, read from the disk.

Before a plugin answers with CDI names it checks them here: what counts is
what a runtime would find in the directory now, not what the plugin believes
it wrote (a reboot empties /var/run/cdi; anyone may remove a file). Each
``*.json`` spec is parsed once per version of the file (its inode, size and
modification time), so a check costs a directory listing and a stat per file.
Files that do not parse define nothing. YAML specs are not read: every spec
this project writes is JSON.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

_Stamp = tuple[int, int, int]  # inode, size, mtime_ns


def _names(text: str) -> frozenset[str]:
    try:
        spec = json.loads(text)
        kind = spec["kind"]
        devices = spec["devices"]
        if not isinstance(kind, str) or not isinstance(devices, list):
            return frozenset()
        return frozenset(f"{kind}={d['name']}" for d in devices if isinstance(d, dict))
    except (ValueError, KeyError, TypeError):
        return frozenset()


@dataclass
class DefinedDevices:
    """The qualified CDI names (``vendor/class=name``) defined in ``directory``."""

    directory: Path
    _parsed: dict[str, tuple[_Stamp, frozenset[str]]] = field(default_factory=dict)

    def read(self) -> frozenset[str]:
        """Every name the directory's JSON specs define now (blocking: run off the loop)."""
        found: set[str] = set()
        seen: dict[str, tuple[_Stamp, frozenset[str]]] = {}
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            entries = []
        for entry in entries:
            if not entry.name.endswith(".json"):
                continue
            try:
                st = entry.stat()
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                cached = self._parsed.get(entry.name)
                if cached is None or cached[0] != stamp:
                    with open(entry.path, encoding="utf-8") as f:
                        cached = (stamp, _names(f.read()))
            except (FileNotFoundError, UnicodeDecodeError):
                continue  # removed meanwhile, or not a spec
            seen[entry.name] = cached
            found |= cached[1]
        self._parsed = seen
        return frozenset(found)

    def missing(self, names: set[str] | frozenset[str] | tuple[str, ...]) -> list[str]:
        """The names among ``names`` that no spec defines now, sorted."""
        if not names:
            return []
        defined = self.read()
        return sorted(n for n in names if n not in defined)
