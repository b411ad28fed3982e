"""Which devices pods hold, from the kubelet's PodResources API (v1).

Backends ask synchronously (``in_use``) from the event loop, so answers come
from a cache; a stale cache schedules one refresh in the background and the
caller sees the new answer on its next ask (backends re-check on every
rescan). ``None`` means "unknown" (no socket, kubelet not answering):
callers fall back to their own rule instead of guessing.

Metrics ask which containers hold each device (``holders``) from a scrape
thread; those answers come from the same cache, replaced whole on refresh,
and a scrape only schedules a refresh (``touch``), never waits for one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import grpc

from accel_plugins.plugin.backend import PodRef

log = logging.getLogger(__name__)

DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")

_NOBODY: tuple[PodRef, ...] = ()
_NO_DEVICES: Mapping[str, tuple[PodRef, ...]] = {}


class PodResourcesCache:
    def __init__(
        self,
        socket: Path = DEFAULT_POD_RESOURCES_SOCKET,
        *,
        max_age: float = 2.0,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket = socket
        self.max_age = max_age
        self.timeout = timeout
        self._clock = clock
        self._held: Mapping[str, frozenset[str]] | None = None
        self._holders: Mapping[str, Mapping[str, tuple[PodRef, ...]]] = {}
        self._fetched = float("-inf")
        self._refreshing: asyncio.Task[None] | None = None
        self._warned = False

    @property
    def available(self) -> bool:
        """True while the last refresh reached the kubelet."""
        return self._held is not None

    def in_use(self, resource: str) -> frozenset[str] | None:
        """IDs of ``resource`` that pods hold, as of at most ``max_age`` ago (or None)."""
        if self._clock() - self._fetched >= self.max_age:
            self._schedule_refresh()
        if self._held is None:
            return None
        return self._held.get(resource, frozenset())

    def holders(self, resource: str, device_id: str) -> tuple[PodRef, ...]:
        """Containers holding the device as of the last refresh; empty when unknown."""
        return self._holders.get(resource, _NO_DEVICES).get(device_id, _NOBODY)

    def holders_of(self, resource: str) -> Mapping[str, tuple[PodRef, ...]]:
        """Device ID -> holders, for every held device of ``resource`` (any thread)."""
        return self._holders.get(resource, _NO_DEVICES)

    def touch(self) -> None:
        """Schedule a refresh when the cache is stale; returns at once (event loop only)."""
        if self._clock() - self._fetched >= self.max_age:
            self._schedule_refresh()

    def _schedule_refresh(self) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self.refresh())

    async def refresh(self) -> None:
        self._fetched = self._clock()
        if not self.socket.exists():
            self._forget()
            return
        # The API's messages load with the first kubelet that serves it (issue 34).
        from accel_plugins.api import podresources_v1_pb2 as pr
        from accel_plugins.api import podresources_v1_pb2_grpc as pr_grpc

        try:
            async with grpc.aio.insecure_channel(f"unix://{self.socket}") as channel:
                stub = pr_grpc.PodResourcesListerStub(channel)
                listed = await stub.List(pr.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            if not self._warned:
                log.warning(
                    "pod resources at %s: %s %s", self.socket, exc.code().name, exc.details()
                )
                self._warned = True
            self._forget()
            return
        self._warned = False
        holders: dict[str, dict[str, list[PodRef]]] = {}
        for pod in listed.pod_resources:
            for container in pod.containers:
                ref = PodRef(pod.namespace, pod.name, container.name)
                for devices in container.devices:
                    by_id = holders.setdefault(devices.resource_name, {})
                    for device_id in devices.device_ids:
                        refs = by_id.setdefault(device_id, [])
                        if ref not in refs:
                            refs.append(ref)
        self._held = {name: frozenset(by_id) for name, by_id in holders.items()}
        fresh = {
            name: {i: tuple(sorted(refs)) for i, refs in by_id.items()}
            for name, by_id in holders.items()
        }
        # An unchanged resource keeps its old map object: metrics cache by identity.
        old = self._holders
        self._holders = {
            name: old[name] if old.get(name) == by_id else by_id for name, by_id in fresh.items()
        }

    def _forget(self) -> None:
        self._held = None
        self._holders = {}
