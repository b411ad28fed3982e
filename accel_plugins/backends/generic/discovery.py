"""Find the devices a config describes: one full scan, returning Device values.

Units and IDs follow squat's generic-device-plugin, so a node keeps the ID
it had there and across restarts and machines:

- ``paths``: each glob's sorted matches, repeated ``limit`` times, are zipped
  (the i-th entry of every path forms device i); the group yields as many
  devices as the longest match list, capped by the shortest repeated list.
  An ``optional`` path that matches nothing is left out of the zip.
- ``usb``: every USB device matching any entry is one unit (its
  /dev/bus/usb/BBB/DDD node).
- ``udev``: every node all matchers find is one unit; a non-optional matcher
  finding nothing means no unit.

Each unit is offered ``count`` times; replica ``j`` of a unit made of host
paths p1..pn has the ID ``sha1(str(j) + p1 + ... + pn)`` in hex.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from accel_plugins.backends.generic.config import (
    USB_PERMISSIONS,
    DeviceSpec,
    GenericConfig,
    Group,
    PathSpec,
    PathType,
)
from accel_plugins.backends.generic.devdir import expand, is_dir
from accel_plugins.backends.generic.health import path_problem
from accel_plugins.backends.generic.hostfs import HostPaths
from accel_plugins.backends.generic.matches import EntryMatch, GroupMatch
from accel_plugins.backends.generic.sysfs import numa_node
from accel_plugins.backends.generic.udev import UdevEnumerator
from accel_plugins.backends.generic.usb import enumerate_usb, matching
from accel_plugins.plugin.device import Device, DeviceNode, Health, Mount


@dataclass(frozen=True, slots=True)
class UnitFacts:
    """Device.facts of a generic device: which config group it came from, which replica it is.

    The preferred-allocation policy keeps groups whole and takes distinct
    units (replica 0) before second replicas.
    """

    group: int
    replica: int


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Unit:
    """One device before replication: the host paths it is made of."""

    paths: tuple[str, ...]
    nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()


def device_id(replica: int, paths: Iterable[str]) -> str:
    digest = hashlib.sha1(str(replica).encode(), usedforsecurity=False)
    for path in paths:
        digest.update(path.encode())
    return digest.hexdigest()


def _kind(group: Group) -> str:
    return "paths" if group.paths else "usb" if group.usb else "udev"


def container_path(mount_path: str, host_path: str) -> str:
    if not mount_path:
        return host_path
    if mount_path.endswith("/"):
        return mount_path + os.path.basename(host_path)
    return mount_path


class Discovery:
    """Scans for the devices of every resource in a config."""

    def __init__(
        self,
        config: GenericConfig,
        host: HostPaths,
        udev: UdevEnumerator | None = None,
    ) -> None:
        self.config = config
        self.host = host
        self._udev = udev
        self._seen_dirs: set[str] = set()

    @property
    def uses_udev(self) -> bool:
        return any(g.udev or g.usb for spec in self.config.devices for g in spec.groups)

    def scan(self) -> dict[str, list[Device]]:
        """Config device name -> its devices now, in a stable order."""
        self._seen_dirs = set()
        return {spec.name: self._scan_spec(spec) for spec in self.config.devices}

    def matches(self) -> list[EntryMatch]:
        """What each entry's groups find now (--check-config; a scan of its own)."""
        entries = []
        for index, spec in enumerate(self.config.devices):
            groups = tuple(
                GroupMatch(number, _kind(group), tuple(unit.paths for unit in self._units(group)))
                for number, group in enumerate(spec.groups)
            )
            entries.append(EntryMatch(index, spec.name, groups))
        return entries

    def _scan_spec(self, spec: DeviceSpec) -> list[Device]:
        devices: dict[str, Device] = {}
        for index, group in enumerate(spec.groups):
            for unit in self._units(group):
                for replica in range(group.count):
                    device = self._device(unit, replica, index)
                    if device.id in devices:
                        # The same paths reached twice (overlapping groups): offer once.
                        log.debug("%s: %s found twice, kept once", spec.name, unit.paths)
                        continue
                    devices[device.id] = device
        return list(devices.values())

    def _device(self, unit: Unit, replica: int, group: int) -> Device:
        checks = [(n.host_path, PathType.DEVICE) for n in unit.nodes]
        checks += [(m.host_path, PathType.MOUNT) for m in unit.mounts]
        # The first failing path is the reason: enough to act on, short enough for an Event.
        reason = next(
            (r for path, kind in checks if (r := path_problem(self.host, path, kind))), None
        )
        # A directory's NUMA nodes are those of the devices the runtime will find in it.
        numa = {
            numa_node(self.host, inner.host_path)
            for n in unit.nodes
            for inner in expand(self.host, n)
        }
        return Device(
            id=device_id(replica, unit.paths),
            health=Health.HEALTHY if reason is None else Health.UNHEALTHY,
            reason=reason,
            numa_nodes=tuple(sorted(n for n in numa if n is not None)),
            nodes=unit.nodes,
            mounts=unit.mounts,
            facts=UnitFacts(group=group, replica=replica),
        )

    def _units(self, group: Group) -> list[Unit]:
        if group.paths:
            return self._path_units(group.paths)
        if group.usb:
            return self._usb_units(group)
        return self._udev_units(group)

    # -- squat paths ------------------------------------------------------------

    def _path_units(self, specs: tuple[PathSpec, ...]) -> list[Unit]:
        columns: list[tuple[PathSpec, list[str]]] = []
        for spec in specs:
            self._note_dir_of(spec.path)
            matches = self.host.glob(spec.path)
            if not matches and spec.optional:
                continue
            columns.append((spec, matches * spec.limit))
            # squat: the natural length is the longest match list ...
        if not columns:
            return []
        natural = max(len(m) // spec.limit for spec, m in columns)
        # ... capped by the shortest list once limits are applied.
        length = min(natural, *(len(m) for _, m in columns))
        units = []
        for i in range(length):
            nodes: list[DeviceNode] = []
            mounts: list[Mount] = []
            paths = []
            for spec, matches in columns:
                host_path = matches[i]
                paths.append(host_path)
                target = container_path(spec.mount_path, host_path)
                if spec.type is PathType.DEVICE:
                    # A directory is handed over whole, as squat does (devdir.py);
                    # watch it so a node appearing inside rewrites the CDI spec.
                    if is_dir(self.host, host_path):
                        self._seen_dirs.add(host_path)
                    nodes.append(DeviceNode(host_path, target, spec.permissions))
                else:
                    mounts.append(Mount(host_path, target, spec.read_only))
            units.append(Unit(tuple(paths), tuple(nodes), tuple(mounts)))
        return units

    # -- squat usb --------------------------------------------------------------

    def _usb_units(self, group: Group) -> list[Unit]:
        present = enumerate_usb(self.host)
        paths: list[str] = []
        for spec in group.usb:
            for device in matching(spec, present):
                if device.node not in paths:
                    paths.append(device.node)
        for path in paths:
            self._note_dir_of(path)
        if not paths:
            return []
        nodes = tuple(DeviceNode(p, p, USB_PERMISSIONS) for p in paths)
        return [Unit(tuple(paths), nodes)]

    # -- udev -------------------------------------------------------------------

    def _udev_units(self, group: Group) -> list[Unit]:
        if self._udev is None:
            return []
        nodes: dict[str, DeviceNode] = {}
        for matcher in group.udev:
            try:
                found = self._udev.nodes(matcher)
            except OSError as exc:
                # Its devices read as vanished (Unhealthy) until a later scan works.
                log.warning("udev enumeration failed: %s", exc)
                found = []
            if not found and not matcher.optional:
                return []
            for path in found:
                self._note_dir_of(path)
                if path not in nodes:
                    target = container_path(matcher.mount_path, path)
                    nodes[path] = DeviceNode(path, target, matcher.permissions)
        if not nodes:
            return []
        return [Unit(tuple(nodes), tuple(nodes.values()))]

    # -- what to watch ----------------------------------------------------------

    def _note_dir_of(self, host_pattern: str) -> None:
        self._seen_dirs.add(os.path.dirname(host_pattern))

    def watch_dirs(self) -> set[Path]:
        """Local directories whose entries decide the last scan's result.

        For each directory pattern: every existing directory matching it and
        its glob parents, plus the nearest existing ancestor of its fixed
        prefix, so a directory appearing later (``/dev/snd``) is noticed too.
        """
        dirs: set[Path] = {self.host.dev_root} if self.uses_udev else set()
        for pattern in self._seen_dirs:
            parts = pattern.split("/")[1:]
            fixed = next((i for i, p in enumerate(parts) if glob.has_magic(p)), len(parts))
            anchor = Path(self.host.local("/" + "/".join(parts[:fixed])))
            nearest = anchor
            while not nearest.is_dir() and nearest != nearest.parent:
                nearest = nearest.parent
            dirs.add(nearest)
            for level in range(fixed + 1, len(parts) + 1):
                local = self.host.local_pattern("/" + "/".join(parts[:level]))
                for found in glob.glob(local, include_hidden=True):
                    if os.path.isdir(found):
                        dirs.add(Path(found))
        return dirs
