"""Device health: are the nodes there and of the right kind; what to do when they vanish.

A device is Healthy when every ``Device``-type node is a character or block
device (or a directory, which the runtime expands into the nodes inside it, as
squat's plugin relies on: see devdir.py) and every ``Mount``-type path exists.
A device whose paths stop matching is not dropped at once: a pod may hold
it, and the kubelet should see it turn Unhealthy rather than silently shrink
its capacity. It is kept, Unhealthy, until one of:

- its nodes return: the same paths give the same ID, reported Healthy again;
- it is known to be free: ``in_use`` (resource -> IDs held by pods, fed by
  whoever can see allocations) no longer lists it;
- without an ``in_use`` feed, or while it cannot answer (None), ``grace``
  seconds have passed since it vanished (nobody can tell whether a pod still
  holds it). `accel-plugins generic` feeds it from the kubelet's PodResources
  API (``--pod-resources-socket``).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Collection, Mapping

from accel_plugins.backends.generic.config import PathType
from accel_plugins.backends.generic.hostfs import HostPaths
from accel_plugins.plugin.device import Device, Health
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind

InUse = Callable[[str], Collection[str] | None]
"""resource name -> IDs of its devices that pods hold now (None: unknown right now)."""

DEFAULT_VANISHED_GRACE = 300.0


def path_problem(host: HostPaths, host_path: str, kind: PathType) -> HealthReason | None:
    """None while ``host_path`` is usable as ``kind``; else why not.

    Gone is ``node-vanished``; there but not statable (permissions, I/O) or
    not a device node is ``unreadable``.
    """
    try:
        info = os.stat(host.local(host_path))
    except FileNotFoundError:
        return HealthReason(ReasonKind.NODE_VANISHED, f"{host_path} is gone")
    except OSError as exc:
        return HealthReason(ReasonKind.UNREADABLE, f"{host_path}: {exc.strerror or exc}")
    if kind is PathType.MOUNT:
        return None
    mode = info.st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISDIR(mode):
        return None
    return HealthReason(ReasonKind.UNREADABLE, f"{host_path} is not a device node")


class VanishedDevices:
    """Carries devices that disappeared from discovery, Unhealthy, as described above."""

    def __init__(
        self,
        *,
        grace: float = DEFAULT_VANISHED_GRACE,
        in_use: InUse | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._grace = grace
        self._in_use = in_use
        self._clock = clock
        self._last: dict[str, dict[str, Device]] = {}
        self._since: dict[tuple[str, str], float] = {}

    @property
    def carrying(self) -> bool:
        """Vanished devices are being reported; only a later scan can drop them."""
        return bool(self._since)

    def newly_vanished(self, found: Mapping[str, Mapping[str, Device]]) -> bool:
        """Whether ``found`` lacks a device the last tree had and that is not carried yet."""
        return any(
            device_id not in found.get(resource, {}) and (resource, device_id) not in self._since
            for resource, devices in self._last.items()
            for device_id in devices
        )

    def apply(self, found: Mapping[str, Mapping[str, Device]]) -> dict[str, dict[str, Device]]:
        """``found`` plus the vanished devices still worth reporting."""
        now = self._clock()
        out: dict[str, dict[str, Device]] = {}
        since: dict[tuple[str, str], float] = {}
        for resource, devices in found.items():
            merged = dict(devices)
            held = None
            for device_id, old in self._last.get(resource, {}).items():
                if device_id in devices:
                    continue
                key = (resource, device_id)
                started = self._since.get(key, now)
                if held is None and self._in_use is not None:
                    held = self._in_use(resource)
                # No feed, or the kubelet cannot tell us now: the grace period decides.
                keep = device_id in held if held is not None else now - started < self._grace
                if keep:
                    reason = old.reason if old.reason is not None else _vanished(old)
                    merged[device_id] = old.with_health(Health.UNHEALTHY, reason)
                    since[key] = started
            out[resource] = merged
        self._last = out
        self._since = since
        return out


def _vanished(device: Device) -> HealthReason:
    paths = ", ".join(n.host_path for n in device.nodes) or device.id
    return HealthReason(ReasonKind.NODE_VANISHED, f"{paths} no longer found")
