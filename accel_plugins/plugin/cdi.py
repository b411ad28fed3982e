"""CDI (Container Device Interface) spec files: one writer for every backend.

A backend that names CDI devices in its Allocate answers (``vendor.com/class=name``)
must also leave a spec on the node that tells the container runtime what each name
means, or the runtime refuses the container. This module models such a spec (the
subset of CDI the backends use: env, device nodes, mounts, hooks), renders it as
the CDI JSON format and keeps it on disk: written to a temporary name and renamed
(a runtime never reads half a spec), rewritten only when its content changes, and
removed when the plugin stops (a stale spec would name devices nobody serves).

Only the standard library is imported: ``accel_plugins.plugin`` stays light.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_plugins.plugin.device import Device, DeviceNode
from accel_plugins.util.fsutil import atomic_write_text

log = logging.getLogger(__name__)

BASE_VERSION = "0.3.0"
"""The oldest spec version written: each spec is stamped with the lowest version that
holds what it uses (:func:`minimum_version`), as the CDI library's
``MinimumRequiredVersion`` does for NVIDIA's writer, so older runtimes still read it."""

DEFAULT_SPEC_DIR = Path("/var/run/cdi")
"""Where CDI-aware runtimes (containerd, CRI-O, podman) look for specs, besides /etc/cdi."""


@dataclass(frozen=True, slots=True)
class CdiNode:
    """A device node with what the CDI library records of the host's node (``lstat``):
    its numbers, permission bits and group; NVIDIA's writer describes nodes so."""

    path: str
    host_path: str = ""
    permissions: str = "rwm"
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    gid: int | None = None
    additional_gids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CdiMount:
    """A mount a CDI spec asks for; ``options`` as mount(8) takes them (``ro``, ``rbind``)."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CdiHook:
    """An OCI hook the runtime runs; ``hook_name`` is the OCI stage (``createContainer``)."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """What a CDI device (or a whole spec) adds to a container: ``NAME=value`` env entries,
    device nodes, mounts and OCI hooks."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode | CdiNode, ...] = ()
    mounts: tuple[CdiMount, ...] = ()
    hooks: tuple[CdiHook, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.env or self.device_nodes or self.mounts or self.hooks)

    def merged(self, *others: ContainerEdits) -> ContainerEdits:
        """These edits then the others', each entry once (the ``all`` device of a spec)."""
        parts = (self, *others)
        return ContainerEdits(
            env=tuple(dict.fromkeys(e for p in parts for e in p.env)),
            device_nodes=tuple(dict.fromkeys(n for p in parts for n in p.device_nodes)),
            mounts=tuple(dict.fromkeys(m for p in parts for m in p.mounts)),
            hooks=tuple(dict.fromkeys(h for p in parts for h in p.hooks)),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [_node_json(n) for n in self.device_nodes]
        if self.mounts:
            out["mounts"] = [_mount_json(m) for m in self.mounts]
        if self.hooks:
            out["hooks"] = [_hook_json(h) for h in self.hooks]
        return out


def _node_json(node: DeviceNode | CdiNode) -> dict[str, Any]:
    """A node as CDI writes it: ``hostPath`` only where it differs from ``path``."""
    if isinstance(node, DeviceNode):
        node = CdiNode(node.container_path, node.host_path, node.permissions)
    out: dict[str, Any] = {"path": node.path}
    if node.host_path and node.host_path != node.path:
        out["hostPath"] = node.host_path
    for key, value in (
        ("major", node.major),
        ("minor", node.minor),
        ("fileMode", node.file_mode),
        ("gid", node.gid),
    ):
        if value:  # the library leaves zero values out
            out[key] = value
    if node.permissions:
        out["permissions"] = node.permissions
    if node.additional_gids:
        out["additionalGids"] = list(node.additional_gids)
    return out


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest CDI version that holds what the JSON ``spec`` uses (the CDI library's
    ``specs-go/version.go``): 0.4.0 mount types, 0.5.0 device names that begin with a
    digit and ``hostPath`` on nodes, 0.6.0 annotations and a class with a dot, 0.7.0
    ``additionalGids``."""
    edits = [spec.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in spec.get("devices", [])]
    nodes = [n for e in edits for n in e.get("deviceNodes") or []]
    if any(n.get("additionalGids") for n in nodes):
        return "0.7.0"
    kind_class = str(spec.get("kind", "")).partition("/")[2]
    devices = spec.get("devices", [])
    annotated = spec.get("annotations") or any(d.get("annotations") for d in devices)
    if annotated or "." in kind_class:
        return "0.6.0"
    digit_name = any(str(d.get("name", ""))[:1].isdigit() for d in devices)
    if digit_name or any(n.get("hostPath") for n in nodes):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts") or []):
        return "0.4.0"
    return BASE_VERSION


def _mount_json(mount: CdiMount) -> dict[str, Any]:
    out: dict[str, Any] = {"hostPath": mount.host_path, "containerPath": mount.container_path}
    if mount.options:
        out["options"] = list(mount.options)
    return out


def _hook_json(hook: CdiHook) -> dict[str, Any]:
    out: dict[str, Any] = {"hookName": hook.hook_name, "path": hook.path}
    if hook.args:
        out["args"] = list(hook.args)
    if hook.env:
        out["env"] = list(hook.env)
    return out


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One device of a spec, requested as ``<kind>=<name>``."""

    name: str
    edits: ContainerEdits


@dataclass(frozen=True, slots=True)
class CdiSpec:
    """One spec file: ``kind`` (``vendor/class``), its devices, and the edits every
    container that names any of them gets (``edits``)."""

    kind: str
    devices: tuple[CdiDevice, ...]
    edits: ContainerEdits = field(default_factory=ContainerEdits)

    @property
    def file_name(self) -> str:
        """``<vendor>-<class>.json``, the name the CDI library itself gives a spec."""
        return self.kind.replace("/", "-") + ".json"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cdiVersion": BASE_VERSION, "kind": self.kind}
        if self.edits:
            out["containerEdits"] = self.edits.to_json()
        out["devices"] = [
            {"name": d.name, "containerEdits": d.edits.to_json()} for d in self.devices
        ]
        out["cdiVersion"] = minimum_version(out)
        return out

    def text(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def qualified_name(kind: str, name: str) -> str:
    """``vendor.com/class=name``, as a runtime is asked for a device."""
    return f"{kind}={name}"


Expand = Callable[[DeviceNode], Sequence[DeviceNode]]
"""The device nodes a runtime creates for one node (e.g. a directory: the nodes inside)."""


def _as_is(node: DeviceNode) -> Sequence[DeviceNode]:
    return (node,)


def device_edits(device: Device, expand: Expand = _as_is) -> ContainerEdits:
    """A framework Device's nodes, mounts and env as CDI edits (read-only mounts ``ro``)."""
    return ContainerEdits(
        env=tuple(f"{k}={v}" for k, v in device.envs.items()),
        device_nodes=tuple(inner for node in device.nodes for inner in expand(node)),
        mounts=tuple(
            CdiMount(m.host_path, m.container_path, ("bind", "ro") if m.read_only else ("bind",))
            for m in device.mounts
        ),
    )


def spec_of_devices(kind: str, devices: Mapping[str, Device], expand: Expand = _as_is) -> CdiSpec:
    """One CDI device per framework Device, named by its ID, in ID order."""
    return CdiSpec(
        kind,
        tuple(CdiDevice(i, device_edits(devices[i], expand)) for i in sorted(devices)),
    )


class CdiSpecWriter:
    """Keeps a set of spec files in one directory equal to what the backend serves.

    :meth:`sync` writes each spec whose text changed and removes the files of
    specs it wrote before that are no longer given (or have no devices: CDI
    refuses a spec without one); :meth:`restore` writes again what went missing
    or changed on disk; :meth:`remove_all` removes every file it wrote.
    Files it did not write (other vendors', the toolkit's) are never touched.
    OSError propagates: the caller decides whether a node without a spec can serve.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._written: dict[str, str] = {}  # file name -> text on disk

    @property
    def paths(self) -> list[Path]:
        return [self.directory / name for name in sorted(self._written)]

    def sync(self, specs: Iterable[CdiSpec]) -> list[Path]:
        """Write what changed; returns the paths written now."""
        wanted = {s.file_name: s.text() for s in specs if s.devices}
        written: list[Path] = []
        for name, text in wanted.items():
            if self._written.get(name) == text:
                continue
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.directory / name, text)
            self._written[name] = text
            written.append(self.directory / name)
            log.info("CDI spec written: %s", self.directory / name)
        for name in [n for n in self._written if n not in wanted]:
            self._remove(name)
        return written

    def restore(self) -> list[Path]:
        """Write again each spec of ours whose file is missing or differs from what we
        wrote (a reboot empties /var/run/cdi; anyone may edit or remove a file there).

        Reads every file it owns, so it answers for the disk, not for our memory;
        returns the paths written now. OSError propagates.
        """
        written: list[Path] = []
        for name, text in self._written.items():
            path = self.directory / name
            try:
                if path.read_text(encoding="utf-8") == text:
                    continue
            except (FileNotFoundError, UnicodeDecodeError):
                pass  # gone, or not our text: write it again
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
            written.append(path)
            log.warning("CDI spec %s was missing or changed on disk: written again", path)
        return written

    def remove_all(self) -> None:
        for name in list(self._written):
            self._remove(name)

    def _remove(self, name: str) -> None:
        # Not a directory: the file cannot be there either (someone put a file in its place).
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            (self.directory / name).unlink()
            log.info("CDI spec removed: %s", self.directory / name)
        del self._written[name]
