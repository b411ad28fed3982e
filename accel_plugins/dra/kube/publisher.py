"""KubeSlicePublisher: owns the node's slices of one driver, as a controller owns its objects.

What the API server holds is watched (a list, then a watch with field
selectors ``spec.nodeName`` and ``spec.driver``: observed.py), and whenever it
differs from the newest device tree the pool is written again. That covers the
kubelet, which deletes every slice of the node when it starts and when a driver
registers (pkg/kubelet/cm/dra of v1.34), an operator's ``kubectl delete`` or
``edit``, and our own lost writes. "In sync" means the slices the API server
holds (as last listed, watched or answered to a write) equal the tree, never
"we sent it once".

``publish`` writes at once and returns; when the API server cannot be reached
(or refuses), the newest tree is retried in the background, 1 s doubling to
30 s (retry.py), each failure counted in
``accel_plugins_dra_slice_publish_failures_total``. The watch is restarted the
same way after it fails (expiry, 410, a dropped connection), each time from a
fresh list. Nothing raises into the caller, so an API outage never stops the
kubelet side. A kubelet identity (``system:node:<name>``) may also be refused
an update of a slice it created a moment before, while the Node authorizer's
graph (fed by a watch) has not seen the slice yet: the same retry covers it.
Which optional fields (taints, shared devices, counters) the pool carries is
decided by gates.py.

Slices are left in place by ``close``: the kubelet removes a driver's slices
itself once the driver has been gone for a while, and a restart (same
devices) then publishes nothing new.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.models.resource_v1 import CounterSet
from lightkube.models.resource_v1 import Device as KubeDevice
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice
from prometheus_client import CollectorRegistry, Counter

from accel_plugins.dra.kube.api import ApiVersions, ResourceApi
from accel_plugins.dra.kube.gates import FieldGates
from accel_plugins.dra.kube.observed import ObservedSlices
from accel_plugins.dra.kube.retry import BACKOFF_START, Retrier, doubled
from accel_plugins.dra.kube.shares import ShareMode
from accel_plugins.dra.kube.slices import (
    Describe,
    PoolIdentity,
    build_slices,
    counter_sets,
    pool_devices,
)
from accel_plugins.dra.kube.taints import TaintMode, taint_maker
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.plugin.dra_attributes import DraCounterSets
from accel_plugins.plugin.dra_names import DraNamer
from accel_plugins.plugin.dra_shares import DraSharedUnits
from accel_plugins.plugin.dra_taints import DraTaintKeyer
from accel_plugins.runtime.backoff import jittered

log = logging.getLogger(__name__)

_FAILURES = "accel_plugins_dra_slice_publish_failures"
_REPAIRS = "accel_plugins_dra_slice_repairs"
_API_ERRORS = (ApiError, httpx2.TransportError)


class KubeSlicePublisher:
    """The :class:`~accel_plugins.dra.model.SlicePublisher` on a real API server.

    One pool named after ``node``; its slices are ``<node>-<driver>-<n>``,
    owned by the Node (whose UID is read once). ``describe`` gives each
    device's attributes (the backend's DraDescriber), ``namer`` its DRA name
    (the backend's DraNamer, through ``device_names``), ``keyer`` the key of
    an Unhealthy device's taint (the backend's DraTaintKeyer) where ``taints``
    (``--dra-device-taints``) has them written, ``counters`` the pool's shared
    counters (the backend's DraCounterSets). ``api`` is the resource.k8s.io
    version to write, or the :class:`ApiVersions` that asks the API server
    (default: a new one). ``sleep`` is the backoff's clock (tests pass a fake one).
    ``sharer`` groups copies of shared devices (the backend's DraSharedUnits), published
    once for several claims where ``shares`` allows and the API server keeps the field
    (shares.py).
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        driver: str,
        node: str,
        describe: Describe | None = None,
        namer: DraNamer | None = None,
        registry: CollectorRegistry | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        taints: TaintMode | str = TaintMode.AUTO,
        keyer: DraTaintKeyer | None = None,
        api: ResourceApi | ApiVersions | None = None,
        counters: DraCounterSets | None = None,
        sharer: DraSharedUnits | None = None,
        shares: ShareMode | str = ShareMode.AUTO,
    ) -> None:
        self._client = client
        self._apis = api if isinstance(api, ApiVersions) else ApiVersions(client, api, node=node)
        self._driver = driver
        self._node = node
        self._describe = describe
        self._namer = namer
        self._sleep = sleep
        self._identity: PoolIdentity | None = None
        self._lock = asyncio.Lock()
        self._tree: DeviceTree | None = None
        self._wanted: list[KubeDevice] | None = None
        self._gates = FieldGates(taints=taints, shares=shares, sharing=sharer is not None)
        # By whether the API server takes taint effect None (gates.py, ``informational``).
        self._taints = {ok: taint_maker(driver, keyer, informational=ok) for ok in (True, False)}
        self._counters = counters
        self._sharer = sharer
        self._wanted_sets: list[CounterSet] = []
        self._held = ObservedSlices(client, driver=driver, node=node)
        self._retry = Retrier(self._attempt, lambda: self.in_sync, sleep, name="dra-slice-retry")
        self._watch: asyncio.Task[None] | None = None
        self.failures = Counter(
            _FAILURES,
            "ResourceSlice writes that failed (API server unreachable or refusing); "
            "the newest device tree is retried with backoff.",
            registry=registry,
        )
        self.repairs = Counter(
            _REPAIRS,
            "Times the node's ResourceSlices were found changed or deleted by someone else "
            "(the kubelet's start-up wipe, an operator) and written again.",
            registry=registry,
        )

    @property
    def generation(self) -> int:
        """The pool generation last written or found (0 before either)."""
        return self._held.generation

    @property
    def taints(self) -> bool | None:
        """Whether Unhealthy devices are published tainted (None: not decided yet)."""
        return self._gates.taints

    @property
    def shares(self) -> bool | None:
        """Whether shared devices are published once for several claims (None: not decided)."""
        return self._gates.shares

    @property
    def in_sync(self) -> bool:
        """Whether the slices the API server holds, as last seen, are the newest tree."""
        return (
            self._identity is not None
            and self._wanted is not None
            and self._held.matches(self._desired(self._held.generation))
        )

    async def publish(self, tree: DeviceTree) -> None:
        self._tree = tree
        self._wanted = None
        if self._gates.decided:
            self._wanted = self._pool(tree)
        if await self._attempt():
            return
        self._retry.start(first_delay=BACKOFF_START)

    async def wait_in_sync(self) -> None:
        """Return once the background retries (if any) have written the newest tree."""
        await self._retry.wait()

    async def close(self) -> None:
        """Stop retrying and watching; the slices stay (see the module docstring). A
        publish after it starts again from what the API server holds (another instance
        of the driver may have written the slices meanwhile)."""
        await self._retry.stop()
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        self._watch = None
        self._identity = None

    # -- writing ------------------------------------------------------------------

    async def _attempt(self) -> bool:
        try:
            async with self._lock:
                await self._sync()
        except _API_ERRORS as exc:
            self.failures.inc()
            log.warning("publishing ResourceSlices for %s failed (will retry): %s", self._node, exc)
            return False
        self._check()  # a change the watch saw while we were writing
        return True

    def _pool(self, tree: DeviceTree) -> list[KubeDevice]:
        """The devices to publish; sets the counter sets to publish beside them."""
        taint = self._taints[bool(self._gates.informational)] if self._gates.taints else None
        sharer = self._sharer if self._gates.shares else None
        devices = pool_devices(tree, self._describe, self._namer, taint, sharer)
        if self._counters is not None and self._gates.counters:
            self._wanted_sets = counter_sets(self._counters.dra_counter_sets())
            return devices
        # No counters to share: a device that would use them could be handed out twice.
        self._wanted_sets = []
        return [d for d in devices if not d.consumesCounters]

    def _desired(self, generation: int) -> list[ResourceSlice]:
        assert self._identity is not None
        assert self._wanted is not None
        return build_slices(self._identity, self._wanted, generation, self._wanted_sets)

    async def _sync(self) -> None:
        if self._tree is None:
            return
        if self._identity is None:
            await self._adopt()
        assert self._identity is not None
        await self._gates.decide(self._client, self._held.api, self._identity)
        if self._wanted is None:
            self._wanted = self._pool(self._tree)
        if self.in_sync:
            return
        generation = self._held.generation + 1
        desired = self._desired(generation)
        for wanted in desired:
            if self._gates.dropped(wanted, await self._held.write(wanted)):
                self._wanted = None  # rebuilt without the dropped field on the next try
        keep = {s.metadata.name for s in desired if s.metadata is not None}
        for name in [n for n in self._held.items if n not in keep]:
            await self._held.delete(name)
        self._held.generation = generation
        log.info(
            "ResourceSlices for %s: %d devices in %d slices, generation %d",
            self._node,
            sum(len(s.spec.devices or []) for s in desired),
            len(desired),
            generation,
        )

    async def _adopt(self) -> None:
        """Read the Node's UID and what the API server holds (then watch it)."""
        self._held.api = await self._apis.get()
        node = await self._client.get(Node, self._node)
        assert node.metadata is not None
        assert node.metadata.uid is not None
        await self._held.relist()
        self._identity = PoolIdentity(self._driver, self._node, node.metadata.uid)
        if self._watch is None:
            self._watch = asyncio.create_task(self._watch_loop(), name="dra-slice-watch")

    # -- watching -----------------------------------------------------------------

    async def _watch_loop(self) -> None:
        """Follow the API server's slices; repair what others change. Runs until close."""
        delay = BACKOFF_START
        while True:
            try:
                if self._held.listed_version is None:
                    async with self._lock:
                        await self._held.relist()
                    self._check()
                async for kind, item in self._held.watch():
                    delay = BACKOFF_START
                    if self._held.event(kind, item):
                        self._check()
                log.info("ResourceSlice watch for %s ended; listing again", self._node)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # 410 Gone (too old a version), a dropped connection, a refusal, or what a
                # restarting API server answers: list again. Never end: without this loop
                # nothing repairs the slices.
                log.warning(
                    "watching ResourceSlices for %s failed (will retry): %s: %s",
                    self._node,
                    type(exc).__name__,
                    exc,
                )
                await self._sleep(jittered(delay))
                delay = doubled(delay)

    def _check(self) -> None:
        if self._tree is None or self._lock.locked() or self.in_sync:
            return  # a sync in progress checks again when it ends (_attempt)
        if not self._retry.running:
            self.repairs.inc()
            log.info(
                "ResourceSlices for %s changed by someone else; writing them again", self._node
            )
        self._retry.start(first_delay=0.0)
