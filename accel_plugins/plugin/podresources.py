"""Which devices pods hold, from the kubelet's PodResources API (v1).

Backends ask synchronously (``in_use``) from the event loop, so answers come
from a cache; a stale cache schedules one refresh in the background and the
caller sees the new answer on its next ask (backends re-check on every
rescan). ``None`` means "unknown" (no socket, kubelet not answering):
callers fall back to their own rule instead of guessing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import grpc

from accel_plugins.api import podresources_v1_pb2 as pr
from accel_plugins.api import podresources_v1_pb2_grpc as pr_grpc

log = logging.getLogger(__name__)

DEFAULT_POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")


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

    def _schedule_refresh(self) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self.refresh())

    async def refresh(self) -> None:
        self._fetched = self._clock()
        if not self.socket.exists():
            self._held = None
            return
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
            self._held = None
            return
        self._warned = False
        held: dict[str, set[str]] = {}
        for pod in listed.pod_resources:
            for container in pod.containers:
                for devices in container.devices:
                    held.setdefault(devices.resource_name, set()).update(devices.device_ids)
        self._held = {name: frozenset(ids) for name, ids in held.items()}
