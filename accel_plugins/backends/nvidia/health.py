"""Event-driven GPU health: XID events mark devices Unhealthy, quiet GPUs recover.

Policy (this text is also the README's):

- A thread waits on an NVML event set for XID critical errors on every GPU
  and hands each verdict to the event loop (``call_soon_threadsafe``), so a
  fault reaches the kubelet within one ListAndWatch update of the event.
- XIDs 13, 31, 43, 45, 68 and 109 are application errors and ignored by
  default, as in NVIDIA's plugin. ``DP_DISABLE_HEALTHCHECKS`` adds XIDs to
  ignore (comma-separated), or ``all``/``xids`` ignores every XID.
  ``DP_ENABLE_HEALTHCHECKS`` names XIDs that count even when ignored by
  default or by ``DP_DISABLE_HEALTHCHECKS``, or ``all`` to count every XID.
  ``DP_DISABLE_HEALTHCHECKS=all`` with ``DP_ENABLE_HEALTHCHECKS=48,79``
  watches only 48 and 79 (NVIDIA documents this combination; its code turns
  every check off instead). With everything disabled no thread runs.
- An XID on a MIG device (GPU and compute instance given) marks that MIG
  device; an XID on the whole GPU marks the GPU and all its MIG devices.
  An event NVML cannot attribute marks every GPU, as NVIDIA's plugin does.
- A GPU that falls off the bus (NVML's GPU-is-lost) marks only the GPUs
  that no longer answer; the plugin keeps running.
- When waiting for events fails otherwise, no GPU is watched any more:
  every GPU is marked (as in NVIDIA's plugin), once a second while it lasts.
- Every marked device carries why (docs/health.md): ``xid`` with the XID's
  number and NVIDIA's meaning (xid.py), ``gpu-lost``, or ``unmonitored``
  when the health source itself fails. It keeps the reason that marked it
  until it recovers; later events only restart its quiet period.
- Recovery, unlike NVIDIA's plugin: once a marked device has had no critical
  event for the quiet period (``--health-recovery-seconds``, default 60) it
  is probed (its handle, UUID and memory are read again, and a MIG device
  must still exist). A passing probe reports it Healthy again; a failing
  one keeps it Unhealthy and retries after another quiet period. A new
  critical event restarts the quiet period. ``0`` disables recovery:
  Unhealthy then lasts until the plugin restarts, as in NVIDIA's plugin.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from accel_plugins.backends.nvidia.discovery import Gpu
from accel_plugins.backends.nvidia.errors import GpuLostError, NvmlError, NvmlNotSupportedError
from accel_plugins.backends.nvidia.nvml import EventSet, Nvml, XidEvent
from accel_plugins.backends.nvidia.xid import xid_reason
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind

log = logging.getLogger(__name__)

DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# One NVML event wait, as long as NVIDIA's plugin waits (its health check's
# eventSet.Wait(5000)): an idle plugin wakes every 5 s, not twice a second.
EVENT_WAIT_MS = 5000
# How long stopping waits for the event thread; past it, a real NVML wait
# still runs to its timeout in the (daemon) thread, which then exits.
STOP_JOIN_SECONDS = 1.0
_ALL = frozenset({"all", "xids"})


def _parse_xids(text: str, variable: str) -> tuple[bool, frozenset[int]]:
    """``"all"`` -> (True, {}); ``"48, 79"`` -> (False, {48, 79}); junk is logged and skipped."""
    everything = False
    xids: set[int] = set()
    for raw in text.lower().split(","):
        token = raw.strip()
        if not token:
            continue
        if token in _ALL:
            everything = True
        elif token.isdigit():
            xids.add(int(token))
        else:
            log.warning("%s: ignoring %r, which is not an XID number or 'all'", variable, token)
    return everything, frozenset(xids)


@dataclass(frozen=True, slots=True)
class XidPolicy:
    """Which XIDs make a device Unhealthy."""

    ignored: frozenset[int] = DEFAULT_IGNORED_XIDS
    ignore_all: bool = False
    enabled: frozenset[int] = frozenset()
    enable_all: bool = False

    @classmethod
    def from_env(cls, disable: str = "", enable: str = "") -> XidPolicy:
        ignore_all, ignored = _parse_xids(disable, "DP_DISABLE_HEALTHCHECKS")
        enable_all, enabled = _parse_xids(enable, "DP_ENABLE_HEALTHCHECKS")
        return cls(
            ignored=DEFAULT_IGNORED_XIDS | ignored,
            ignore_all=ignore_all,
            enabled=enabled,
            enable_all=enable_all,
        )

    @property
    def watching(self) -> bool:
        """False when no XID can ever count, so no event thread is needed."""
        return self.enable_all or bool(self.enabled) or not self.ignore_all

    def is_critical(self, xid: int) -> bool:
        if self.enable_all or xid in self.enabled:
            return True
        if self.ignore_all:
            return False
        return xid not in self.ignored


@dataclass(frozen=True, slots=True)
class Fault:
    """Why a unit (a GPU or MIG UUID) is Unhealthy, and when it last misbehaved."""

    reason: HealthReason
    since: float
    last: float


def _unmonitored(detail: str) -> HealthReason:
    return HealthReason(ReasonKind.UNMONITORED, detail)


class HealthMonitor:
    """Tracks unhealthy units (GPU and MIG UUIDs) and tells ``on_change`` when they change.

    ``run`` owns the event thread and the recovery timers; it returns only
    when cancelled, after the thread has stopped and freed its event set.
    """

    def __init__(
        self,
        nvml: Nvml,
        gpus: Sequence[Gpu],
        policy: XidPolicy,
        *,
        on_change: Callable[[], None],
        recovery_seconds: float = 60.0,
        wait_ms: int = EVENT_WAIT_MS,
    ) -> None:
        self._nvml = nvml
        self._gpus = {g.uuid: g for g in gpus}
        self._policy = policy
        self._on_change = on_change
        self._recovery = recovery_seconds
        self._wait_ms = wait_ms
        self._faults: dict[str, Fault] = {}
        self._stop = threading.Event()
        self._events: EventSet | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._probes: set[asyncio.Future[None]] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._mig_parent = {m.uuid: g.uuid for g in gpus for m in g.migs}
        # (GPU UUID, XID) -> events seen, ignored XIDs included: the metrics' XID counter.
        self._xids: dict[tuple[str, int], int] = {}
        self._xids_lock = threading.Lock()
        self.ready = asyncio.Event()
        """Set once every GPU is registered for events (or at once when checks are off)."""

    @property
    def faults(self) -> Mapping[str, Fault]:
        return dict(self._faults)

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        """The GPUs this monitor watches, in discovery order."""
        return tuple(self._gpus.values())

    def xid_counts(self) -> dict[tuple[str, int], int]:
        """(GPU UUID, XID) -> how many events arrived, whatever the policy made of them."""
        with self._xids_lock:
            return dict(self._xids)

    @property
    def pending_recoveries(self) -> list[str]:
        """Units with a recovery check scheduled (none when recovery is disabled)."""
        return sorted(self._timers)

    def parent_of(self, unit: str) -> str | None:
        return self._mig_parent.get(unit)

    # -- the event loop side -------------------------------------------------

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        if not self._policy.watching:
            log.info("XID health checks are disabled (DP_DISABLE_HEALTHCHECKS)")
            self.ready.set()
            await asyncio.Event().wait()
        thread = threading.Thread(target=self._watch, name="nvml-health", daemon=True)
        thread.start()
        try:
            await asyncio.Event().wait()
        finally:
            self._stop.set()
            for timer in self._timers.values():
                timer.cancel()
            for probe in self._probes:
                probe.cancel()
            interrupted = self._events is not None and self._events.interrupt()
            # An interrupted wait ends at once: join the thread. NVML's ends only at
            # its timeout: past STOP_JOIN_SECONDS the daemon thread ends on its own.
            limit = None if interrupted else STOP_JOIN_SECONDS
            await asyncio.shield(asyncio.to_thread(thread.join, limit))

    def mark(self, units: Iterable[str], reason: HealthReason) -> None:
        """Record a critical fault on ``units`` (event-loop thread only)."""
        assert self._loop is not None
        now = self._loop.time()
        changed = False
        for unit in units:
            old = self._faults.get(unit)
            # The reason stays the one that made the unit Unhealthy: a storm of mixed XIDs
            # only restarts the quiet period, rather than flooding every channel with news.
            first = old.reason if old else reason
            self._faults[unit] = Fault(reason=first, since=old.since if old else now, last=now)
            if old is None:
                changed = True
                log.warning("device %s is Unhealthy: %s", unit, reason)
            self._schedule(unit, self._recovery)
        if changed:
            self._on_change()

    def _schedule(self, unit: str, delay: float) -> None:
        if self._recovery <= 0 or self._loop is None or unit in self._timers:
            return
        self._timers[unit] = self._loop.call_later(delay, self._due, unit)

    def _due(self, unit: str) -> None:
        assert self._loop is not None
        self._timers.pop(unit, None)
        fault = self._faults.get(unit)
        if fault is None:
            return
        quiet = self._loop.time() - fault.last
        if quiet < self._recovery:
            self._schedule(unit, self._recovery - quiet)
            return
        probe = asyncio.ensure_future(self._probe_then_recover(unit, fault))
        self._probes.add(probe)
        probe.add_done_callback(self._probes.discard)

    async def _probe_then_recover(self, unit: str, fault: Fault) -> None:
        assert self._loop is not None
        problem = await self._loop.run_in_executor(None, self.probe, unit)
        if self._faults.get(unit) is not fault:
            return  # a newer event arrived meanwhile; its own timer decides
        if problem is not None:
            log.info("device %s still fails its probe (%s); staying Unhealthy", unit, problem)
            self._schedule(unit, self._recovery)
            return
        del self._faults[unit]
        log.info("device %s recovered after a quiet period and a passing probe", unit)
        self._on_change()

    # -- probes (any thread) ---------------------------------------------------

    def probe(self, unit: str) -> str | None:
        """None when the GPU (and MIG device) answer sanely, else what went wrong."""
        parent = self._mig_parent.get(unit, unit)
        gpu = self._gpus.get(parent)
        if gpu is None:
            return "unknown device"
        try:
            handle = self._nvml.device_handle(gpu.index)
            if self._nvml.uuid(handle) != gpu.uuid:
                return "another GPU now answers at this index"
            self._nvml.memory_total(handle)
            if unit != parent:
                migs = self._nvml.mig_handles(handle)
                if unit not in {self._nvml.uuid(m) for m in migs}:
                    return "the MIG device no longer exists"
        except NvmlError as exc:
            return str(exc)
        return None

    # -- the NVML thread -----------------------------------------------------------

    def _report(self, units: Iterable[str], reason: HealthReason) -> None:
        chosen = list(units)
        if chosen and self._loop is not None and not self._stop.is_set():
            self._loop.call_soon_threadsafe(self.mark, chosen, reason)

    def _lost_units(self) -> list[str]:
        lost: list[str] = []
        for gpu in self._gpus.values():
            try:
                handle = self._nvml.device_handle(gpu.index)
                self._nvml.uuid(handle)
            except GpuLostError:
                lost.append(gpu.uuid)
            except NvmlError:
                continue
        return lost

    def _register(self, events: EventSet) -> None:
        for gpu in self._gpus.values():
            try:
                events.register(self._nvml.device_handle(gpu.index))
            except NvmlNotSupportedError:
                log.warning("GPU %s cannot report XIDs; it is not health-checked", gpu.uuid)
            except GpuLostError as exc:
                self._report([gpu.uuid], HealthReason(ReasonKind.GPU_LOST, str(exc)))
            except NvmlError as exc:
                self._report([gpu.uuid], _unmonitored(f"cannot watch for XIDs: {exc}"))

    def _watch(self) -> None:
        try:
            events = self._nvml.create_event_set()
        except NvmlError as exc:
            log.error("cannot create an NVML event set, every GPU is Unhealthy: %s", exc)
            self._report(self._gpus, _unmonitored(f"no health events: {exc}"))
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self.ready.set)
            return
        self._events = events
        try:
            self._register(events)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self.ready.set)
            while not self._stop.is_set():
                try:
                    event = events.wait(self._wait_ms)
                except GpuLostError:
                    lost = self._lost_units()
                    log.error("NVML reports a lost GPU: %s", ", ".join(lost) or "none found")
                    self._report(lost, HealthReason(ReasonKind.GPU_LOST, "fell off the bus"))
                    continue
                except NvmlError as exc:
                    log.error("waiting for NVML events failed, every GPU is Unhealthy: %s", exc)
                    # Unwatched GPUs cannot be promised healthy; each failure restarts
                    # their quiet period, so they recover only once waits work again.
                    self._report(self._gpus, _unmonitored(f"health events failed: {exc}"))
                    self._stop.wait(1.0)  # no hot loop on a persistent error
                    continue
                if event is not None:
                    self._handle(event)
        finally:
            with contextlib.suppress(NvmlError):
                events.free()

    def _handle(self, event: XidEvent) -> None:
        gpu_uuid = self._mig_parent.get(event.uuid or "", event.uuid)
        if gpu_uuid is not None and gpu_uuid in self._gpus:
            with self._xids_lock:
                key = (gpu_uuid, event.xid)
                self._xids[key] = self._xids.get(key, 0) + 1
        if not self._policy.is_critical(event.xid):
            log.info("ignoring XID %d on %s (not critical under the policy)", event.xid, event.uuid)
            return
        reason = xid_reason(event.xid)
        if event.uuid is None:
            unattributed = f"{reason.detail} (on an unidentified GPU)"
            self._report(self._gpus, dataclasses.replace(reason, detail=unattributed))
            return
        gpu = self._gpus.get(event.uuid)
        if gpu is None:
            log.info("ignoring XID %d on unknown device %s", event.xid, event.uuid)
            return
        if event.gpu_instance is not None:
            for mig in gpu.migs:
                if (mig.gpu_instance, mig.compute_instance) == (
                    event.gpu_instance,
                    event.compute_instance,
                ):
                    self._report([mig.uuid], reason)
                    return
        self._report([gpu.uuid], reason)
