"""The boundary between vendor code and the framework.

A backend only describes devices. It never imports grpc and never sees a
socket. Optional capabilities are separate one-method Protocols; the servicer
derives DevicePluginOptions from which of them the backend implements.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceTree

if TYPE_CHECKING:
    # Only for the annotation: the framework itself does not use prometheus_client.
    from prometheus_client.metrics_core import Metric

Publish = Callable[[DeviceTree], None]
"""Hands the manager a complete new snapshot. Must be called on the event loop
thread; backends with threads use ``loop.call_soon_threadsafe``."""


@runtime_checkable
class Backend(Protocol):
    """Produces snapshots of every resource it owns and announces changes."""

    async def run(self, publish: Publish) -> None:
        """Publish the current tree at once, then a new tree after every change.

        Runs until cancelled. A hardware read that fails must publish the
        affected devices Unhealthy rather than raise; an exception escaping
        here is treated as a crash of the backend and logged by the manager.
        """
        ...


@runtime_checkable
class Allocator(Protocol):
    """Builds a container's response itself instead of the default merge."""

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation: ...


@runtime_checkable
class PreferredAllocator(Protocol):
    """Chooses which devices the kubelet should allocate (topology awareness)."""

    def preferred_allocation(
        self,
        resource: str,
        available: Sequence[Device],
        must_include: Sequence[Device],
        size: int,
    ) -> Sequence[str]:
        """Return ``size`` device IDs from ``available`` that include ``must_include``.

        Raise AllocationError for a request that cannot be met.
        """
        ...


@runtime_checkable
class PreferenceScope(Protocol):
    """Says per resource whether its PreferredAllocator can choose better than any pick.

    A resource without anything to prefer (one GPU, devices all alike on one
    NUMA node) is registered without GetPreferredAllocation, which saves the
    kubelet a round trip per pod. Called on the event loop for every snapshot
    of the resource: keep it cheap. Without this capability a PreferredAllocator
    is asked for every resource.
    """

    def has_preference(self, resource: str, devices: Collection[Device]) -> bool: ...


@runtime_checkable
class PreStarter(Protocol):
    """Runs a device-specific step before each container start (e.g. a reset)."""

    def pre_start(self, resource: str, devices: Sequence[Device]) -> None: ...


@runtime_checkable
class CdiSpecKeeper(Protocol):
    """Writes the CDI specs that define the names its answers carry, and keeps them there.

    A node's CDI directory (/var/run/cdi) is a tmpfs that a reboot empties, and
    anyone may remove a file from it; a name whose spec is gone makes the runtime
    refuse the container. The framework calls :meth:`ensure_cdi_specs` (off the
    event loop, with the hook deadline) before it answers with such names, but
    only while :attr:`keeps_cdi_specs` is true (read once per backend), so a
    backend with CDI switched off pays nothing.
    """

    @property
    def keeps_cdi_specs(self) -> bool: ...

    def ensure_cdi_specs(self, resource: str) -> None:
        """Write again every spec of ours that is missing or changed on disk; OSError
        (or BackendError) when that fails: the answer is then refused, not sent."""
        ...


@runtime_checkable
class Warmer(Protocol):
    """Loads ahead what its hooks load on their first call (modules, tables, caches).

    Start-up stays lean by loading such things late, but then the first
    Allocate (or DRA Prepare) pays for them while a pod waits. The framework
    calls :meth:`warm` once the kubelet has the devices, in a worker thread, in
    both modes, so the first call costs what later ones cost. It must be safe
    beside a hook call running at the same time; an exception is logged and
    changes nothing else.
    """

    def warm(self) -> None: ...


@runtime_checkable
class PreferenceWarmer(Protocol):
    """Loads ahead what GetPreferredAllocation loads on its first call (a topology
    table, say), as :class:`Warmer` does for Allocate. Called in device-plugin mode
    only, after :meth:`Warmer.warm`: DRA has no preferred allocation, so a DRA
    driver never pays for it (issue 34)."""

    def warm_preferences(self) -> None: ...


def cdi_keeper(backend: object) -> CdiSpecKeeper | None:
    """``backend`` as a CdiSpecKeeper when it keeps specs now, else None."""
    if isinstance(backend, CdiSpecKeeper) and backend.keeps_cdi_specs:
        return backend
    return None


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    """A container that holds a device, as the kubelet's PodResources API reports it."""

    namespace: str
    pod: str
    container: str


Holders = Callable[[str, str], Sequence[PodRef]]
"""(resource, device ID) -> the containers holding that device now; empty when none
or when the kubelet cannot say (no PodResources socket)."""


@runtime_checkable
class MetricsProvider(Protocol):
    """Contributes its own series to ``/metrics``, read at scrape time (e.g. GPU telemetry).

    Called from a worker thread, never the event loop, so it may block on
    hardware briefly; it must read only snapshots the loop replaces whole.
    A reading that fails leaves its series out instead of raising.
    """

    def collect_metrics(self, holders: Holders) -> Iterable[Metric]: ...
