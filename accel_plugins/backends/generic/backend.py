"""GenericBackend: publishes the devices a config describes, again on every change.

The loop is: scan everything (globs, USB sysfs, udev enumeration) in a worker
thread, add back devices that vanished but may still be held (health.py),
publish if anything differs, then sleep until a udev event, an inotify event
or the anchor timer (monitor.py). A full rescan on every wakeup keeps the
logic simple and the result exact; a scan costs milliseconds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from accel_plugins.backends.generic.config import GenericConfig
from accel_plugins.backends.generic.devdir import expand
from accel_plugins.backends.generic.discovery import Discovery, UnitFacts
from accel_plugins.backends.generic.eventsource import EventPaths, UdevSource
from accel_plugins.backends.generic.health import DEFAULT_VANISHED_GRACE, InUse, VanishedDevices
from accel_plugins.backends.generic.hostfs import HostPaths
from accel_plugins.backends.generic.matches import EntryMatch, unmatched_message
from accel_plugins.backends.generic.monitor import ChangeFeed, Wakeup
from accel_plugins.backends.generic.names import DEFAULT_DOMAIN, resource_name
from accel_plugins.backends.generic.udev import UdevEnumerator
from accel_plugins.errors import HookError
from accel_plugins.plugin.allocation import (
    natural_key,
    prefer_fewest_numa_nodes,
    spans_numa_nodes,
)
from accel_plugins.plugin.backend import Publish
from accel_plugins.plugin.command import RefreshInUse
from accel_plugins.plugin.device import Device, DeviceNode, DeviceTree

if TYPE_CHECKING:
    # CDI specs (--cdi-spec-dir) and DRA descriptions are opt-in: imported where
    # used, they stay off the path from exec to registration (issue 17).
    from accel_plugins.plugin.cdi import CdiSpecWriter
    from accel_plugins.plugin.dra_attributes import DraDeviceInfo

log = logging.getLogger(__name__)

DEFAULT_RESCAN_INTERVAL = 5.0


@dataclass(frozen=True, slots=True)
class GenericSettings:
    """How the generic backend runs.

    domain: resources are ``<domain>/<name>``.
    dev_root / sys_root: where this process sees the host's /dev and /sys.
    cdi_spec_dir: write CDI specs there and name CDI devices in responses;
        None (the default) disables CDI.
    udev_source: which uevents to listen to (auto: udevd's when it listens in
        this network namespace, else the kernel's; see eventsource.py).
    event_paths: where that choice reads its facts, and udevd's database.
    rescan_interval: seconds between anchor rescans when nothing happens.
    vanished_grace: how long a vanished device stays listed Unhealthy when no
        allocation feed says whether it is held (see health.py).
    """

    domain: str = DEFAULT_DOMAIN
    dev_root: Path = Path("/dev")
    sys_root: Path = Path("/sys")
    cdi_spec_dir: Path | None = None
    udev_source: UdevSource = UdevSource.AUTO
    event_paths: EventPaths = field(default_factory=EventPaths)
    rescan_interval: float = DEFAULT_RESCAN_INTERVAL
    vanished_grace: float = DEFAULT_VANISHED_GRACE


class GenericBackend:
    """Implements the framework's Backend protocol for /dev hardware."""

    def __init__(
        self,
        config: GenericConfig,
        settings: GenericSettings | None = None,
        *,
        in_use: InUse | None = None,
        refresh_in_use: RefreshInUse | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._refresh_in_use = refresh_in_use
        self.settings = settings or GenericSettings()
        host = self._host = HostPaths(self.settings.dev_root, self.settings.sys_root)
        needs_udev = any(g.udev for spec in config.devices for g in spec.groups)
        self._discovery = Discovery(config, host, UdevEnumerator() if needs_udev else None)
        self._vanished = VanishedDevices(
            grace=self.settings.vanished_grace, in_use=in_use, clock=clock
        )
        # Specs are rebuilt on every scan and rewritten when their text changes: a
        # directory path's nodes (devdir.py) can change while its Device does not.
        directory = self.settings.cdi_spec_dir
        self._cdi: CdiSpecWriter | None = None
        if directory is not None:
            from accel_plugins.plugin.cdi import CdiSpecWriter

            self._cdi = CdiSpecWriter(directory)
        self._feed: ChangeFeed | None = None
        self.scans = 0

    def resource(self, name: str) -> str:
        return resource_name(self.settings.domain, name)

    @property
    def resources(self) -> list[str]:
        return [self.resource(spec.name) for spec in self.config.devices]

    def _uevent_subsystems(self) -> set[str] | None:
        """Subsystems worth waking up for; None means every uevent."""
        wanted: set[str] = set()
        for spec in self.config.devices:
            for group in spec.groups:
                if group.usb:
                    wanted.add("usb")
                for matcher in group.udev:
                    # An ancestor's attribute may change under any subsystem.
                    if matcher.attributes or not matcher.subsystem:
                        return None
                    if any(c in matcher.subsystem for c in "*?["):
                        return None
                    wanted.add(matcher.subsystem)
        return wanted

    def discover(self) -> dict[str, dict[str, Device]]:
        """What is there now, by resource (file system and udev reads: run in a thread)."""
        self.scans += 1
        found: dict[str, dict[str, Device]] = {}
        for name, devices in self._discovery.scan().items():
            kind = self.resource(name)
            if self.settings.cdi_spec_dir is not None:
                from accel_plugins.plugin.cdi import qualified_name

                devices = [
                    dataclasses.replace(d, cdi_devices=(qualified_name(kind, d.id),))
                    for d in devices
                ]
            found[kind] = {d.id: d for d in devices}
        return found

    def matches(self) -> list[EntryMatch]:
        """What each config entry matches on this node now (file system and udev reads)."""
        return self._discovery.matches()

    def _warn_unmatched(self, found: Mapping[str, Mapping[str, Device]]) -> None:
        """One warning per entry that found nothing, once per backend (start, reload)."""
        for index, spec in enumerate(self.config.devices):
            if not found.get(self.resource(spec.name)):
                entry = EntryMatch(index, spec.name, ())
                log.warning("%s", unmatched_message(self.config, entry))

    def dra_device(self, resource: str, device: Device) -> DraDeviceInfo:
        """DraDescriber: path, udev properties, vendor/product IDs (dra_attributes.py)."""
        from accel_plugins.backends.generic.dra_attributes import describe as describe_dra

        return describe_dra(device, self._host, self.settings.event_paths.udev_data)

    def dra_shared_unit(self, resource: str, device: Device) -> str | None:
        """DraSharedUnits: the copies squat's ``count`` makes of one unit share a name,
        hashed from the group and the unit's host paths (stable, as the copies' IDs are)."""
        facts = device.facts if isinstance(device.facts, UnitFacts) else None
        if facts is None:
            return None
        counts = {
            self.resource(spec.name): [group.count for group in spec.groups]
            for spec in self.config.devices
        }
        group_counts = counts.get(resource, [])
        if facts.group >= len(group_counts) or group_counts[facts.group] < 2:
            return None
        paths = sorted({n.host_path for n in device.nodes} | {m.host_path for m in device.mounts})
        digest = hashlib.sha1(
            "\0".join([str(facts.group), *paths]).encode(), usedforsecurity=False
        ).hexdigest()
        return f"shared-{digest[:16]}"

    def scan(self) -> dict[str, dict[str, Device]]:
        """One full scan, vanished devices included: the tree to publish."""
        return self._vanished.apply(self.discover())

    def _write_cdi(self, tree: Mapping[str, Mapping[str, Device]]) -> None:
        """One spec per resource, kind ``<domain>/<name>``, a CDI device per device ID.

        A CDI ``deviceNodes`` entry must be a device node (the CDI library refuses a
        directory), so a directory path (``/dev/snd``) is listed as the nodes inside.
        A resource without devices has no spec (CDI wants at least one device).
        """
        if self._cdi is None:
            return
        from accel_plugins.plugin.cdi import spec_of_devices

        host = self._host

        def nodes_of(node: DeviceNode) -> list[DeviceNode]:
            return expand(host, node)

        specs = [spec_of_devices(kind, devices, nodes_of) for kind, devices in tree.items()]
        try:
            self._cdi.sync(specs)
        except OSError as exc:  # retried on the next scan
            log.error("cannot write the CDI specs in %s: %s", self._cdi.directory, exc)

    @property
    def keeps_cdi_specs(self) -> bool:
        """CdiSpecKeeper: with --cdi-spec-dir, answers name our specs' devices."""
        return self._cdi is not None

    def ensure_cdi_specs(self, resource: str) -> None:
        """CdiSpecKeeper: write again the specs a reboot or a hand removed from disk."""
        if self._cdi is None:
            return
        try:
            self._cdi.restore()
        except OSError as exc:
            raise HookError(
                f"cannot write the CDI specs in {self._cdi.directory}: {exc}", "INTERNAL"
            ) from exc

    def preferred_allocation(
        self,
        resource: str,
        available: Sequence[Device],
        must_include: Sequence[Device],
        size: int,
    ) -> list[str]:
        """One NUMA node if possible, then the fewest; within them the fewest config
        groups, best fit first so bigger groups stay whole; distinct units before
        second replicas of a unit (two replicas of one unit are the same node twice)."""
        return prefer_fewest_numa_nodes(
            available, must_include, size, group_of=_config_group, order=_units_first
        )

    def has_preference(self, resource: str, devices: Collection[Device]) -> bool:
        """Something to choose: two NUMA nodes, two config groups, or replicas of two units.

        Replicas of one unit (``count: 4`` of /dev/null) are the same nodes
        whichever is taken: nothing to choose there.
        """
        if spans_numa_nodes(devices):
            return True
        groups: set[int] = set()
        units: set[tuple[DeviceNode, ...]] = set()
        replicated = False
        for device in devices:
            facts = device.facts_as(UnitFacts)
            replicated = replicated or facts.replica > 0
            groups.add(facts.group)
            units.add(device.nodes)
        return len(groups) > 1 or (replicated and len(units) > 1)

    def _rescan_timer(self, feed: ChangeFeed) -> float | None:
        """Seconds until the next scan without an event; None while events cover everything.

        An idle plugin of path globs wakes only for inotify events on every
        directory that decides the scan. The timer stays for what no event is
        sure to report: a directory inotify could not watch; udev or USB
        matchers (their attributes live in sysfs, which inotify cannot watch,
        and inside a pod without the host's network udevd's uevents never
        arrive, so a monitor that opened is no proof that events come); and
        vanished devices whose holders (or grace period) only a later scan
        can check.
        """
        events_cover = feed.watching_all and not self._discovery.uses_udev
        if events_cover and not self._vanished.carrying:
            return None
        return self.settings.rescan_interval

    def _udev_database(self, feed: ChangeFeed) -> set[Path]:
        """udevd's database directory, when a kernel uevent comes before what we match.

        The kernel's uevent reaches us while udevd is still running its rules;
        ID_* properties (rules, hwdb) exist only once udevd has written the
        device's file in /run/udev/data (a rename into the directory), so that
        write is watched too and wakes the scan that sees them. Only matchers
        with properties need it: subsystems, names and attributes are in sysfs
        at the kernel's event, and udevd's own events come after its write.
        """
        database = self.settings.event_paths.udev_data
        wanted = any(
            m.properties for spec in self.config.devices for g in spec.groups for m in g.udev
        )
        if feed.source is UdevSource.KERNEL and wanted and database.is_dir():
            return {database}
        return set()

    def rescan(self) -> None:
        """Scan again now (when running), as if a device event had arrived."""
        if self._feed is not None:
            self._feed.signal(Wakeup.REQUEST)

    async def run(self, publish: Publish) -> None:
        feed = self._feed = ChangeFeed()
        try:
            if self._discovery.uses_udev:
                feed.start_udev(
                    self.settings.udev_source,
                    self._uevent_subsystems(),
                    self.settings.event_paths,
                )
            also_watch = self._udev_database(feed)
            last: DeviceTree | None = None
            reason = Wakeup.REQUEST
            while True:
                feed.clear()
                found = await asyncio.to_thread(self.discover)
                if last is None:
                    self._warn_unmatched(found)
                # On the loop: the in_use feed reads state owned by the loop. A device
                # that just vanished is decided on what the kubelet says now: a list
                # taken before a pod got it would drop a held device (seen on a node).
                if self._refresh_in_use is not None and self._vanished.newly_vanished(found):
                    await self._refresh_in_use()
                tree = self._vanished.apply(found)
                self._write_cdi(tree)
                if tree != last:
                    _log_changes(last or {}, tree, reason)
                    publish(tree)
                    last = tree
                if feed.watch(self._discovery.watch_dirs() | also_watch):
                    # A directory appeared between scan and watch: look again now.
                    feed.signal(Wakeup.INOTIFY)
                reason = await feed.wait(self._rescan_timer(feed))
        finally:
            self._feed = None
            feed.close()
            if self._cdi is not None:
                self._cdi.remove_all()  # nobody serves these devices any more


def _config_group(device: Device) -> object:
    return device.facts_as(UnitFacts).group


def _units_first(device: Device) -> tuple[object, ...]:
    return (device.facts_as(UnitFacts).replica, natural_key(device.id))


def _log_changes(old: DeviceTree, new: DeviceTree, reason: Wakeup) -> None:
    for resource, devices in new.items():
        before = old.get(resource, {})
        added = [i for i in devices if i not in before]
        gone = [i for i in before if i not in devices]
        flipped = [
            f"{i}={d.health.value}"
            for i, d in devices.items()
            if i in before and before[i].health is not d.health
        ]
        if added or gone or flipped or resource not in old:
            log.info(
                "%s: %d devices (%d healthy) after %s; added %s; removed %s; health %s",
                resource,
                len(devices),
                sum(d.healthy for d in devices.values()),
                reason.value,
                _few(added),
                _few(gone),
                _few(flipped),
            )


def _few(items: list[str], shown: int = 4) -> str:
    """A log-sized list: short IDs, the first few, and how many more."""
    if not items:
        return "-"
    text = ", ".join(item[:12] + item[40:] for item in items[:shown])
    return text + (f" (+{len(items) - shown} more)" if len(items) > shown else "")
