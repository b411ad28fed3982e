"""KubeSlicePublisher: owns the node's slices of one driver, as a controller owns its objects.

What the API server holds is watched (a list, then a watch with field
selectors ``spec.nodeName`` and ``spec.driver``), and whenever it differs from
the newest device tree the pool is written again. That covers the kubelet,
which deletes every slice of the node when it starts and when a driver
registers (pkg/kubelet/cm/dra of v1.34), an operator's ``kubectl delete`` or
``edit``, and our own lost writes. "In sync" means the slices the API server
holds (as last listed, watched or answered to a write) equal the tree, never
"we sent it once".

``publish`` writes at once and returns; when the API server cannot be reached
(or refuses), the newest tree is retried in the background, 1 s doubling to
30 s, each failure counted in ``accel_plugins_dra_slice_publish_failures_total``.
The watch is restarted the same way after it fails (expiry, 410, a dropped
connection), each time from a fresh list. Nothing raises into the caller, so
an API outage never stops the kubelet side. A kubelet identity
(``system:node:<name>``) may also be refused an update of a slice it created
a moment before, while the Node authorizer's graph (fed by a watch) has not
seen the slice yet: the same retry covers it.

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
from lightkube.models.meta_v1 import Status
from lightkube.models.resource_v1 import CounterSet
from lightkube.models.resource_v1 import Device as KubeDevice
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice
from prometheus_client import CollectorRegistry, Counter

from accel_plugins.dra.kube.api import V1, ApiVersions, ResourceApi
from accel_plugins.dra.kube.shares import ShareMode
from accel_plugins.dra.kube.slices import (
    Describe,
    PoolIdentity,
    build_slices,
    carry_taint_times,
    counter_sets,
    pool_devices,
    probe_shares_slice,
    probe_slice,
    same_slice,
)
from accel_plugins.dra.kube.taints import TaintMode, taint_maker
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.plugin.dra_attributes import DraCounterSets
from accel_plugins.plugin.dra_names import DraNamer
from accel_plugins.plugin.dra_shares import DraSharedUnits
from accel_plugins.plugin.dra_taints import DraTaintKeyer

log = logging.getLogger(__name__)

BACKOFF_START = 1.0
BACKOFF_MAX = 30.0
WRITE_TRIES = 3
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
        self._api = V1  # until _adopt asks self._apis
        self._driver = driver
        self._node = node
        self._describe = describe
        self._namer = namer
        self._sleep = sleep
        self._identity: PoolIdentity | None = None
        self._lock = asyncio.Lock()
        self._tree: DeviceTree | None = None
        self._wanted: list[KubeDevice] | None = None
        self._taint_mode = TaintMode(taints)
        self._taints: bool | None = None
        self._taint = taint_maker(driver, keyer)
        self._counters = counters
        self._sharer = sharer
        self._share_mode = ShareMode(shares)
        self._shares: bool | None = None
        self._counters_kept = True  # until the API server drops them
        self._wanted_sets: list[CounterSet] = []
        self._observed: dict[str, ResourceSlice] = {}
        self._listed_version: str | None = None
        self._generation = 0
        self._retry: asyncio.Task[None] | None = None
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
        return self._generation

    @property
    def taints(self) -> bool | None:
        """Whether Unhealthy devices are published tainted (None: not decided yet)."""
        return self._taints

    @property
    def shares(self) -> bool | None:
        """Whether shared devices are published once for several claims (None: not decided)."""
        return self._shares

    @property
    def in_sync(self) -> bool:
        """Whether the slices the API server holds, as last seen, are the newest tree."""
        return self._identity is not None and self._wanted is not None and self._matches()

    async def publish(self, tree: DeviceTree) -> None:
        self._tree = tree
        self._wanted = None
        if self._taints is not None and self._shares is not None:
            self._wanted = self._pool(tree)
        if await self._attempt():
            return
        self._retry_in_background(first_delay=BACKOFF_START)

    async def wait_in_sync(self) -> None:
        """Return once the background retries (if any) have written the newest tree."""
        while self._retry is not None and not self._retry.done():
            await asyncio.shield(self._retry)

    async def close(self) -> None:
        """Stop retrying and watching; the slices stay (see the module docstring)."""
        for task in (self._retry, self._watch):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._retry = self._watch = None

    # -- writing ------------------------------------------------------------------

    def _retry_in_background(self, first_delay: float) -> None:
        if self._retry is None or self._retry.done():
            self._retry = asyncio.create_task(self._retry_loop(first_delay), name="dra-slice-retry")

    async def _retry_loop(self, delay: float) -> None:
        while not self.in_sync:
            if delay:
                await self._sleep(delay)
            if await self._attempt():
                return
            delay = min(max(delay * 2, BACKOFF_START), BACKOFF_MAX)

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
        taint = self._taint if self._taints else None
        sharer = self._sharer if self._shares else None
        devices = pool_devices(tree, self._describe, self._namer, taint, sharer)
        if self._counters is not None and self._counters_kept:
            self._wanted_sets = counter_sets(self._counters.dra_counter_sets())
            return devices
        # No counters to share: a device that would use them could be handed out twice.
        self._wanted_sets = []
        return [d for d in devices if not d.consumesCounters]

    def _desired(self, generation: int) -> list[ResourceSlice]:
        assert self._identity is not None
        assert self._wanted is not None
        return build_slices(self._identity, self._wanted, generation, self._wanted_sets)

    def _matches(self) -> bool:
        """Whether the observed slices are exactly the wanted pool, whole, at one generation."""
        desired = self._desired(self._generation)
        names = {s.metadata.name for s in desired if s.metadata is not None}
        if set(self._observed) != names:
            return False
        return all(
            same_slice(self._observed[s.metadata.name], s)
            for s in desired
            if s.metadata is not None and s.metadata.name is not None
        )

    async def _sync(self) -> None:
        if self._tree is None:
            return
        if self._identity is None:
            await self._adopt()
        if self._taints is None:
            await self._decide_taints()
        if self._shares is None:
            await self._decide_shares()
        if self._wanted is None:
            self._wanted = self._pool(self._tree)
        if self._matches():
            return
        generation = self._generation + 1
        desired = self._desired(generation)
        for wanted in desired:
            await self._write(wanted)
        keep = {s.metadata.name for s in desired if s.metadata is not None}
        for name in [n for n in self._observed if n not in keep]:
            await self._delete(name)
        self._generation = generation
        log.info(
            "ResourceSlices for %s: %d devices in %d slices, generation %d",
            self._node,
            sum(len(s.spec.devices or []) for s in desired),
            len(desired),
            generation,
        )

    async def _adopt(self) -> None:
        """Read the Node's UID and what the API server holds (then watch it)."""
        self._api = await self._apis.get()
        node = await self._client.get(Node, self._node)
        assert node.metadata is not None
        assert node.metadata.uid is not None
        await self._relist()
        self._identity = PoolIdentity(self._driver, self._node, node.metadata.uid)
        if self._watch is None:
            self._watch = asyncio.create_task(self._watch_loop(), name="dra-slice-watch")

    async def _decide_taints(self) -> None:
        """Taints on or off, logged once; ``auto`` asks the API server with a dry-run create."""
        assert self._identity is not None
        if self._taint_mode is not TaintMode.AUTO:
            self._taints = self._taint_mode is TaintMode.ON
            log.info("device taints: %s (--dra-device-taints)", self._taint_mode.value)
            return
        answer = self._api.from_wire(
            await self._client.create(self._api.to_wire(probe_slice(self._identity)), dry_run=True)
        )
        self._taints = any(d.taints for d in answer.spec.devices or [])
        if self._taints:
            log.info("device taints: on (the API server keeps ResourceSlice device taints)")
        else:
            log.warning(
                "device taints: off (the API server drops ResourceSlice device taints: its "
                "feature gate DRADeviceTaints is off); Unhealthy devices are left out instead"
            )

    async def _decide_shares(self) -> None:
        """Shared devices once for several claims, or as copies; ``auto`` asks the API server."""
        assert self._identity is not None
        if self._sharer is None or self._share_mode is not ShareMode.AUTO:
            self._shares = self._sharer is not None and self._share_mode is ShareMode.ON
            log.info("shared devices: %s (--dra-shared-devices)", self._share_mode.value)
            return
        probe = self._api.to_wire(probe_shares_slice(self._identity))
        answer = self._api.from_wire(await self._client.create(probe, dry_run=True))
        self._shares = any(d.allowMultipleAllocations for d in answer.spec.devices or [])
        log.info(
            "shared devices: %s",
            "one device for several claims (the API server keeps allowMultipleAllocations)"
            if self._shares
            else "one device per copy (the API server drops allowMultipleAllocations: its "
            "feature gate DRAConsumableCapacity is off)",
        )

    def _taints_dropped(self, sent: ResourceSlice, written: ResourceSlice) -> None:
        """The API server dropped our taints after all (``on`` where the gate is off)."""
        if any(d.taints for d in sent.spec.devices or []) and not any(
            d.taints for d in written.spec.devices or []
        ):
            log.error(
                "device taints: the API server drops them (feature gate DRADeviceTaints off?); "
                "Unhealthy devices are left out instead"
            )
            self._taints = False
            self._wanted = None

    def _shares_dropped(self, sent: ResourceSlice, written: ResourceSlice) -> None:
        """The API server dropped allowMultipleAllocations (``on`` where the gate is off):
        publish the copies instead, rather than one device for one claim at a time."""
        if _allows_multiple(sent) and not _allows_multiple(written):
            log.error(
                "shared devices: the API server drops allowMultipleAllocations (feature gate "
                "DRAConsumableCapacity off?); publishing one device per copy instead"
            )
            self._shares = False
            self._wanted = None

    def _counters_dropped(self, sent: ResourceSlice, written: ResourceSlice) -> None:
        """The API server dropped the shared counters (its DRAPartitionableDevices gate is off)."""
        used = [d.name for d in sent.spec.devices or [] if d.consumesCounters]
        kept = [d.name for d in written.spec.devices or [] if d.consumesCounters]
        if (sent.spec.sharedCounters and not written.spec.sharedCounters) or (used and not kept):
            log.error(
                "shared counters: the API server drops them (feature gate "
                "DRAPartitionableDevices off?); devices that use them are left out"
            )
            self._counters_kept = False
            self._wanted = None

    async def _relist(self) -> None:
        """Replace what we believe the API server holds with a fresh list of it."""
        listing = self._client.list(self._api.slice_type, fields=self._selector())
        found: dict[str, ResourceSlice] = {}
        async for wire in listing:
            item = self._api.from_wire(wire)
            assert item.metadata is not None
            assert item.metadata.name is not None
            found[item.metadata.name] = item
        self._observed = found
        self._listed_version = listing.resourceVersion
        self._generation = max(
            [self._generation, *(s.spec.pool.generation for s in found.values())]
        )

    def _selector(self) -> dict[str, str | BinaryOperator | SequenceOperator]:
        return {"spec.nodeName": self._node, "spec.driver": self._driver}

    async def _write(self, desired: ResourceSlice) -> None:
        """Create or replace one slice; only a replace carries a resourceVersion."""
        assert desired.metadata is not None
        assert desired.metadata.name is not None
        name = desired.metadata.name
        for _ in range(WRITE_TRIES):
            current = self._observed.get(name)
            version = current.metadata.resourceVersion if current and current.metadata else None
            try:
                if version is None:
                    desired.metadata.resourceVersion = None
                    written = await self._client.create(self._api.to_wire(desired))
                else:
                    desired.metadata.resourceVersion = version
                    carry_taint_times(desired, self._observed.values())
                    written = await self._client.replace(self._api.to_wire(desired))
            except ApiError as exc:
                if exc.status.code == 404 or (exc.status.code == 403 and version is not None):
                    # Gone meanwhile: create it. A node identity is told 403, not 404: the
                    # Node authorizer finds no relationship to an object that is not there.
                    self._observed.pop(name, None)
                elif exc.status.code == 409:
                    await self._refresh(name)  # changed or created meanwhile: read it
                else:
                    raise
                continue
            held = self._api.from_wire(written)
            self._observe(held)
            self._taints_dropped(desired, held)
            self._shares_dropped(desired, held)
            self._counters_dropped(desired, held)
            return
        raise ApiError(status=Status(code=409, message=f"ResourceSlice {name}: conflict"))

    async def _refresh(self, name: str) -> None:
        try:
            self._observe(self._api.from_wire(await self._client.get(self._api.slice_type, name)))
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            self._observed.pop(name, None)

    async def _delete(self, name: str) -> None:
        try:
            await self._client.delete(self._api.slice_type, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        self._observed.pop(name, None)

    def _observe(self, item: ResourceSlice) -> None:
        assert item.metadata is not None
        assert item.metadata.name is not None
        self._observed[item.metadata.name] = item

    # -- watching -----------------------------------------------------------------

    async def _watch_loop(self) -> None:
        """Follow the API server's slices; repair what others change. Runs until close."""
        delay = BACKOFF_START
        while True:
            try:
                if self._listed_version is None:
                    async with self._lock:
                        await self._relist()
                    self._check()
                version, self._listed_version = self._listed_version, None
                async for kind, wire in self._client.watch(
                    self._api.slice_type, fields=self._selector(), resource_version=version
                ):
                    delay = BACKOFF_START
                    self._event(kind, self._api.from_wire(wire))
                log.info("ResourceSlice watch for %s ended; listing again", self._node)
            except _API_ERRORS as exc:
                # 410 Gone (too old a version), a dropped connection, a refusal: list again.
                log.warning(
                    "watching ResourceSlices for %s failed (will retry): %s", self._node, exc
                )
                await self._sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)

    def _event(self, kind: str, item: ResourceSlice) -> None:
        assert item.metadata is not None
        name = item.metadata.name
        assert name is not None
        held = self._observed.get(name)
        if held is not None and _older(item, held):
            return  # an event about a state our own write already replaced
        if kind == "DELETED":
            self._observed.pop(name, None)
        else:
            self._observed[name] = item
        self._check()

    def _check(self) -> None:
        if self._tree is None or self._lock.locked() or self.in_sync:
            return  # a sync in progress checks again when it ends (_attempt)
        if self._retry is None or self._retry.done():
            self.repairs.inc()
            log.info(
                "ResourceSlices for %s changed by someone else; writing them again", self._node
            )
        self._retry_in_background(first_delay=0.0)


def _older(event: ResourceSlice, held: ResourceSlice) -> bool:
    """Whether ``event`` is older than ``held`` (etcd's resourceVersions are integers)."""
    assert event.metadata is not None
    assert held.metadata is not None
    try:
        return int(event.metadata.resourceVersion or "") < int(held.metadata.resourceVersion or "")
    except ValueError:
        return False


def _allows_multiple(found: ResourceSlice) -> bool:
    return any(d.allowMultipleAllocations for d in found.spec.devices or [])
