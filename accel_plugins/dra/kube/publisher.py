"""KubeSlicePublisher: keeps the node's ResourceSlices equal to the latest device tree.

``publish`` writes at once and returns; when the API server cannot be reached
(or refuses), the newest tree is retried in the background, 1 s doubling to
30 s, each failure counted in ``accel_plugins_dra_slice_publish_failures_total``.
Nothing raises into the caller, so an API outage never stops the kubelet side.
A kubelet identity (``system:node:<name>``) may also be refused an update of a
slice it created a moment before, while the Node authorizer's graph (fed by a
watch) has not seen the slice yet: the same retry covers it. The chart runs the
driver under its own ServiceAccount, whose RBAC has no such lag.
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
from lightkube.models.resource_v1 import Device as KubeDevice
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice
from prometheus_client import CollectorRegistry, Counter

from accel_plugins.dra.kube.slices import (
    Describe,
    PoolIdentity,
    build_slices,
    pool_devices,
    same_devices,
)
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.plugin.dra_names import DraNamer

log = logging.getLogger(__name__)

BACKOFF_START = 1.0
BACKOFF_MAX = 30.0
_FAILURES = "accel_plugins_dra_slice_publish_failures"


class KubeSlicePublisher:
    """The :class:`~accel_plugins.dra.model.SlicePublisher` on a real API server.

    One pool named after ``node``; its slices are ``<node>-<driver>-<n>``,
    owned by the Node (whose UID is read once). ``describe`` gives each
    device's attributes (the backend's DraDescriber), ``namer`` its DRA name
    (the backend's DraNamer, through ``device_names``). ``sleep`` is the
    backoff's clock (tests pass a fake one).
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
    ) -> None:
        self._client = client
        self._driver = driver
        self._node = node
        self._describe = describe
        self._namer = namer
        self._sleep = sleep
        self._identity: PoolIdentity | None = None
        self._lock = asyncio.Lock()
        self._wanted: list[KubeDevice] | None = None
        self._published: list[KubeDevice] | None = None
        self._slice_count = 0
        self._generation = 0
        self._retry: asyncio.Task[None] | None = None
        self._versions: dict[str, str | None] = {}
        self.failures = Counter(
            _FAILURES,
            "ResourceSlice writes that failed (API server unreachable or refusing); "
            "the newest device tree is retried with backoff.",
            registry=registry,
        )

    @property
    def generation(self) -> int:
        """The pool generation last written (0 before the first write)."""
        return self._generation

    @property
    def in_sync(self) -> bool:
        """Whether the API server holds the newest tree."""
        return self._wanted is not None and self._wanted is self._published

    async def publish(self, tree: DeviceTree) -> None:
        self._wanted = pool_devices(tree, self._describe, self._namer)
        if await self._attempt():
            return
        if self._retry is None or self._retry.done():
            self._retry = asyncio.create_task(self._retry_loop(), name="dra-slice-retry")

    async def wait_in_sync(self) -> None:
        """Return once the background retries (if any) have written the newest tree."""
        while self._retry is not None and not self._retry.done():
            await asyncio.shield(self._retry)

    async def close(self) -> None:
        """Stop retrying; the slices stay (see the module docstring)."""
        if self._retry is not None:
            self._retry.cancel()
            await asyncio.gather(self._retry, return_exceptions=True)
            self._retry = None

    async def _retry_loop(self) -> None:
        delay = BACKOFF_START
        while not self.in_sync:
            await self._sleep(delay)
            if await self._attempt():
                return
            delay = min(delay * 2, BACKOFF_MAX)

    async def _attempt(self) -> bool:
        try:
            async with self._lock:
                await self._sync()
            return True
        except (ApiError, httpx2.TransportError) as exc:
            self.failures.inc()
            log.warning("publishing ResourceSlices for %s failed (will retry): %s", self._node, exc)
            return False

    async def _sync(self) -> None:
        wanted = self._wanted
        if wanted is None or wanted is self._published:
            return
        if self._identity is None:
            await self._adopt()
        identity = self._identity
        assert identity is not None
        if self._published is not None and same_devices(wanted, self._published):
            self._published = wanted
            return
        generation = self._generation + 1
        slices = build_slices(identity, wanted, generation)
        for desired in slices:
            await self._write(desired)
        for index in range(len(slices), self._slice_count):
            await self._delete(identity.slice_name(index))
        self._generation, self._slice_count, self._published = generation, len(slices), wanted
        log.info(
            "ResourceSlices for %s: %d devices in %d slices, generation %d",
            self._node,
            len(wanted),
            len(slices),
            generation,
        )

    async def _adopt(self) -> None:
        """Read the Node's UID and what a previous run left (generation, devices).

        Our own complete pool is taken as published, so a restart with the
        same devices writes nothing; anything else (a half-written pool,
        slices named otherwise) is rewritten at the next generation.
        """
        node = await self._client.get(Node, self._node)
        assert node.metadata is not None
        assert node.metadata.uid is not None
        identity = PoolIdentity(self._driver, self._node, node.metadata.uid)
        existing: dict[str, ResourceSlice] = {}
        async for item in self._client.list(
            ResourceSlice,
            fields={"spec.nodeName": self._node, "spec.driver": self._driver},
        ):
            assert item.metadata is not None
            assert item.metadata.name is not None
            existing[item.metadata.name] = item
            self._versions[item.metadata.name] = item.metadata.resourceVersion
        indexes = {name: identity.slice_index(name) for name in existing}
        for name in [n for n, i in indexes.items() if i is None]:
            await self._delete(name)
            del existing[name]
        self._generation = max((s.spec.pool.generation for s in existing.values()), default=0)
        self._slice_count = max((i + 1 for i in indexes.values() if i is not None), default=0)
        names = [identity.slice_name(i) for i in range(self._slice_count)]
        if all(n in existing for n in names) and _complete(
            list(existing.values()), self._generation
        ):
            self._published = [d for n in names for d in existing[n].spec.devices or []]
        else:
            self._published = None
        self._identity = identity

    async def _write(self, desired: ResourceSlice) -> None:
        """Create or replace one slice, with the resourceVersion last seen (GET on a conflict)."""
        assert desired.metadata is not None
        assert desired.metadata.name is not None
        name = desired.metadata.name
        for _ in range(2):
            version = self._versions.get(name)
            try:
                if version is None:
                    written = await self._client.create(desired)
                else:
                    desired.metadata.resourceVersion = version
                    written = await self._client.replace(desired)
            except ApiError as exc:
                if exc.status.code not in (404, 409):
                    raise
                self._versions[name] = await self._current_version(name)
                continue
            assert written.metadata is not None
            self._versions[name] = written.metadata.resourceVersion
            return
        raise ApiError(status=Status(code=409, message=f"ResourceSlice {name}: conflict"))

    async def _current_version(self, name: str) -> str | None:
        try:
            current = await self._client.get(ResourceSlice, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            return None
        assert current.metadata is not None
        return current.metadata.resourceVersion

    async def _delete(self, name: str) -> None:
        try:
            await self._client.delete(ResourceSlice, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        self._versions.pop(name, None)


def _complete(items: list[ResourceSlice], generation: int) -> bool:
    return all(
        s.spec.pool.generation == generation and s.spec.pool.resourceSliceCount == len(items)
        for s in items
    )
