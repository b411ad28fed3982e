"""What every check works with: the driver's kubelet side, the API server, and a small allocator.

The allocator is the scheduler's part, reduced: it takes devices from the
driver's slices for this node (the newest generation of each pool), skips
devices tainted NoSchedule or NoExecute, and never hands out two devices that
draw on one counter set or one device twice, except where a check asks for
admin access or a share. Claims a check prepared are unprepared and deleted
when it ends, whatever its outcome, so checks do not depend on each other's
leftovers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_plugins.conformance.cluster import Allocated, Claim, Cluster
from accel_plugins.conformance.driver_process import DriverProcess
from accel_plugins.conformance.kubelet_side import KubeletSide
from accel_plugins.conformance.slice_rules import devices, pool
from accel_plugins.errors import AccelPluginsError
from accel_plugins.kubelet_emulator.dra import DraClaim, DraClaimResult
from accel_plugins.kubelet_emulator.errors import PluginCallError

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
NO_COMMAND = "the kit did not start the driver (give --driver-command): it cannot restart it"


class Failed(AccelPluginsError):  # noqa: N818 (an outcome, read as "check Failed")
    """The driver broke the check's rule; the message says how."""


class Skipped(AccelPluginsError):  # noqa: N818 (an outcome)
    """The check cannot run against this driver or cluster; the message says why."""


@dataclass(frozen=True)
class Timeouts:
    call: float = 30.0  # one NodePrepareResources / NodeUnprepareResources
    register: float = 60.0  # the driver's registration after a start
    repair: float = 70.0  # slices back after the wipe (kubeletplugin: up to a minute)


@dataclass(frozen=True)
class FreeDevice:
    pool: str
    device: str
    counter_sets: frozenset[str]
    data: dict[str, Any] = field(hash=False, compare=False)


@dataclass
class Session:
    driver: str
    node: str
    cdi_dirs: tuple[Path, ...]
    kubelet: KubeletSide
    cluster: Cluster
    process: DriverProcess | None
    sole_node: bool  # no other node runs this driver in this cluster
    timeouts: Timeouts = field(default_factory=Timeouts)
    registrations_seen: int = 0
    _held: dict[tuple[str, str], str] = field(default_factory=dict)  # device -> claim UID
    _claims: list[Claim] = field(default_factory=list)
    _prepared: dict[str, Claim] = field(default_factory=dict)

    # -- devices and claims --------------------------------------------------------------

    async def free_devices(self) -> list[FreeDevice]:
        """Devices of this node a claim may get now, in slice and device order."""
        found: list[FreeDevice] = []
        items = await self.cluster.node_slices()
        newest: dict[str, int] = {}
        for item in items:
            name = str(pool(item).get("name"))
            newest[name] = max(newest.get(name, 0), int(pool(item).get("generation") or 0))
        used_sets = {
            s
            for item in items
            for d in devices(item)
            if (str(pool(item).get("name")), str(d.get("name"))) in self._held
            for s in _counter_sets(d)
        }
        for item in items:
            name = str(pool(item).get("name"))
            if int(pool(item).get("generation") or 0) != newest[name]:
                continue
            for d in devices(item):
                key = (name, str(d.get("name")))
                sets = _counter_sets(d)
                blocked = any(t.get("effect") in BLOCKING_EFFECTS for t in d.get("taints") or [])
                if key in self._held or blocked or sets & used_sets:
                    continue
                found.append(FreeDevice(name, key[1], sets, d))
                used_sets |= sets  # two free devices never share a counter set either
        return found

    async def claim_for(
        self, count: int, *, why: str = "", namespace: str = ""
    ) -> tuple[Claim, list[Allocated]]:
        """A claim of ``count`` requests (r0, r1, ...), each allocated one free device."""
        free = await self.free_devices()
        if len(free) < count:
            raise Skipped(
                f"{why or 'this check'} needs {count} free devices; the driver's slices for "
                f"{self.node} offer {len(free)}"
            )
        claim = await self.new_claim(
            [self.cluster.exactly(f"r{i}") for i in range(count)], namespace
        )
        results = [
            Allocated(f"r{i}", self.driver, d.pool, d.device) for i, d in enumerate(free[:count])
        ]
        await self.allocate(claim, results)
        return claim, results

    async def new_claim(self, requests: Sequence[dict[str, Any]], namespace: str = "") -> Claim:
        claim = await self.cluster.create_claim(requests, namespace)
        self._claims.append(claim)
        return claim

    async def allocate(self, claim: Claim, results: Sequence[Allocated]) -> dict[str, Any]:
        stored = await self.cluster.allocate(claim, results)
        for r in results:
            if r.driver == self.driver and not r.admin_access and not r.share_id:
                self._held[(r.pool, r.device)] = claim.uid
        return stored

    # -- the kubelet's calls -----------------------------------------------------------------

    async def prepare(self, claims: Sequence[Claim]) -> dict[str, DraClaimResult]:
        """NodePrepareResources; a failing call raises PluginCallError."""
        for c in claims:
            self._prepared[c.uid] = c
        return await self.kubelet.client().prepare(
            [DraClaim(c.namespace, c.name, c.uid) for c in claims], timeout=self.timeouts.call
        )

    async def prepare_one(self, claim: Claim) -> DraClaimResult:
        """NodePrepareResources for one claim, which must be answered without an error."""
        try:
            answer = await self.prepare([claim])
        except PluginCallError as exc:
            raise Failed(f"NodePrepareResources of claim {claim.name} failed: {exc}") from exc
        result = answer.get(claim.uid)
        if result is None:
            raise Failed(f"NodePrepareResources left claim {claim.name} ({claim.uid}) out")
        if result.error:
            raise Failed(f"claim {claim.name} was not prepared: {result.error}")
        return result

    async def unprepare(self, claims: Sequence[Claim]) -> dict[str, str]:
        answer = await self.kubelet.client().unprepare(
            [DraClaim(c.namespace, c.name, c.uid) for c in claims], timeout=self.timeouts.call
        )
        for c in claims:
            self._prepared.pop(c.uid, None)
        return answer

    async def tidy(self) -> None:
        """After each check: unprepare what it left prepared and delete its claims."""
        prepared = list(self._prepared.values())
        if prepared and self.kubelet.registered:
            with contextlib.suppress(PluginCallError, KeyError):
                await self.unprepare(prepared)
        self._prepared.clear()
        for claim in self._claims:
            with contextlib.suppress(AccelPluginsError):
                await self.cluster.delete_claim(claim)
        self._claims.clear()
        self._held.clear()

    # -- the driver's process ------------------------------------------------------------------

    def need_process(self) -> DriverProcess:
        if self.process is None:
            raise Skipped(NO_COMMAND)
        return self.process

    async def wait_registered(self) -> None:
        """Until the driver registers again (after a start, restart or reboot)."""
        if self.process is not None:
            self.process.check_alive()
        await self.kubelet.wait_registered(self.registrations_seen, self.timeouts.register)
        self.registrations_seen = len(self.kubelet.registrations)


def _counter_sets(device: dict[str, Any]) -> frozenset[str]:
    return frozenset(str(c.get("counterSet")) for c in device.get("consumesCounters") or [])
