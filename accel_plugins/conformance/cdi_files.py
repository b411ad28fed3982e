"""CDI specs on disk as a container runtime reads them, and what makes one invalid.

A CDI device ID is ``vendor/class=name``; the runtime finds it in the spec
directories (a later directory wins for a name found in several). The kit
checks what CDI's SPEC.md and its parser (``pkg/parser``) require of a spec: a
known ``cdiVersion``, a ``kind`` of vendor and class, at least one device, each
device named with CDI's characters and with ``containerEdits``, and edits of
the documented shapes. A file that fails is reported with why, since a runtime
skips it and the container then gets nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# SPEC.md's released versions; a runtime refuses a spec of any other.
CDI_VERSIONS = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
VENDOR = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
CLASS = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")  # dots from CDI 0.6.0
DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
EDIT_LISTS = ("env", "deviceNodes", "mounts", "hooks")


@dataclass(frozen=True)
class Found:
    """Where a CDI device ID is defined, or why it is not."""

    cdi_id: str
    spec: Path | None
    problem: str = ""  # "" when defined by a valid spec


def split_id(cdi_id: str) -> tuple[str, str] | None:
    kind, eq, name = cdi_id.partition("=")
    vendor, slash, cls = kind.partition("/")
    if not (eq and slash and VENDOR.fullmatch(vendor) and CLASS.fullmatch(cls)):
        return None
    if not DEVICE_NAME.fullmatch(name):
        return None
    return kind, name


def _edits_problem(edits: Any, where: str) -> str:
    if not isinstance(edits, dict):
        return f"{where} is not an object"
    for key in EDIT_LISTS:
        items = edits.get(key)
        if items is not None and not isinstance(items, list):
            return f"{where}.{key} is not a list"
    for env in edits.get("env") or []:
        if not isinstance(env, str) or "=" not in env:
            return f"{where}.env entry {env!r} is not KEY=VALUE"
    for node in edits.get("deviceNodes") or []:
        if not isinstance(node, dict) or not isinstance(node.get("path"), str):
            return f"{where}.deviceNodes entry {node!r} has no path"
    for mount in edits.get("mounts") or []:
        if not isinstance(mount, dict) or not all(
            isinstance(mount.get(k), str) for k in ("hostPath", "containerPath")
        ):
            return f"{where}.mounts entry {mount!r} needs hostPath and containerPath"
    for hook in edits.get("hooks") or []:
        if not isinstance(hook, dict) or not all(
            isinstance(hook.get(k), str) for k in ("hookName", "path")
        ):
            return f"{where}.hooks entry {hook!r} needs hookName and path"
    return ""


def spec_problem(doc: Any) -> str:
    """Why a runtime would refuse this spec; "" when it is valid."""
    if not isinstance(doc, dict):
        return "not an object"
    if str(doc.get("cdiVersion")).removeprefix("v") not in CDI_VERSIONS:
        return f"cdiVersion {doc.get('cdiVersion')!r} is not one of {', '.join(CDI_VERSIONS)}"
    kind = doc.get("kind")
    vendor, slash, cls = str(kind).partition("/")
    if not (isinstance(kind, str) and slash and VENDOR.fullmatch(vendor) and CLASS.fullmatch(cls)):
        return f"kind {kind!r} is not vendor/class"
    devices = doc.get("devices")
    if not isinstance(devices, list) or not devices:
        return "no devices"
    for i, device in enumerate(devices):
        if not isinstance(device, dict) or not DEVICE_NAME.fullmatch(str(device.get("name"))):
            return f"devices[{i}] has no valid name"
        if "containerEdits" not in device:
            return f"device {device['name']} has no containerEdits"
        problem = _edits_problem(device["containerEdits"], f"device {device['name']}")
        if problem:
            return problem
    if "containerEdits" in doc:
        return _edits_problem(doc["containerEdits"], "containerEdits")
    return ""


def _load(path: Path) -> Any:
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def spec_files(dirs: Sequence[Path]) -> list[Path]:
    files = []
    for directory in dirs:
        if directory.is_dir():
            files += sorted(
                p for p in directory.iterdir() if p.suffix in (".json", ".yaml", ".yml")
            )
    return files


def find(cdi_ids: Sequence[str], dirs: Sequence[Path]) -> list[Found]:
    """Each ID with the spec that defines it (the last directory's, as the runtime picks)."""
    defined: dict[tuple[str, str], tuple[Path, str]] = {}
    for path in spec_files(dirs):
        try:
            doc = _load(path)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            problem, doc = f"unreadable: {exc}", None
        else:
            problem = spec_problem(doc)
        if isinstance(doc, dict):
            for device in doc.get("devices") or []:
                if isinstance(device, dict):
                    defined[(str(doc.get("kind")), str(device.get("name")))] = (path, problem)
    found = []
    for cdi_id in cdi_ids:
        parts = split_id(cdi_id)
        if parts is None:
            found.append(Found(cdi_id, None, "not a qualified CDI name (vendor/class=name)"))
        elif parts not in defined:
            where = ", ".join(str(d) for d in dirs)
            found.append(Found(cdi_id, None, f"no spec in {where} defines it"))
        else:
            path, problem = defined[parts]
            found.append(Found(cdi_id, path, f"{path}: {problem}" if problem else ""))
    return found


def undefined(cdi_ids: Sequence[str], dirs: Sequence[Path]) -> list[str]:
    """'ID: why' for each ID that no valid spec defines."""
    return [f"{f.cdi_id}: {f.problem}" for f in find(cdi_ids, dirs) if f.problem]
