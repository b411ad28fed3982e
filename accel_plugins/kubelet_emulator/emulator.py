"""``Kubelet``: an emulation of the kubelet's device manager, for tests, demos and development.

It serves the Registration service on ``<plugin_dir>/kubelet.sock``, opens a
ListAndWatch stream to every registered plugin, tracks capacity and health,
allocates devices to (pod, container) pairs through the plugin's
GetPreferredAllocation / Allocate / PreStartContainer calls, checkpoints the
allocations, and optionally serves the PodResources v1 API. With a
``plugins_registry_dir`` it also registers plugins the way the kubelet's plugin
watcher does (plugin_watcher.py). It speaks only the public API, so it works
against any vendor's plugin. Registrations and streams are the plugin handler's
(plugin_handler.py); how one allocation is chosen and made, allocate_devices.py;
the gRPC servers and stale sockets, sockets.py; waiting for a state, waiting.py;
the ``accel-plugins kubelet`` entry point, serve_command.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from accel_plugins.kubelet_emulator import checkpoint
from accel_plugins.kubelet_emulator.allocate_devices import allocate_devices
from accel_plugins.kubelet_emulator.allocation import (
    DEFAULT_NAMESPACE,
    AllocationBook,
    AllocationRecord,
)
from accel_plugins.kubelet_emulator.client import DEFAULT_TIMEOUT, PluginClient
from accel_plugins.kubelet_emulator.dra import DraDrivers
from accel_plugins.kubelet_emulator.errors import (
    AllocationConflictError,
    CheckpointError,
    KubeletError,
    ResourceUnavailableError,
    UnknownResourceError,
)
from accel_plugins.kubelet_emulator.plugin_handler import PluginHandler
from accel_plugins.kubelet_emulator.plugin_watcher import PluginWatcher
from accel_plugins.kubelet_emulator.podresources import PodResourcesServicer
from accel_plugins.kubelet_emulator.registration import Registration, Rejection
from accel_plugins.kubelet_emulator.sockets import SocketServers, remove_stale_contents
from accel_plugins.kubelet_emulator.state import ResourceState, ResourceView
from accel_plugins.kubelet_emulator.waiting import Changes, ResourceWanted, describe_predicate

log = logging.getLogger(__name__)

DEFAULT_SOCKET_NAME = "kubelet.sock"
DEFAULT_CHECKPOINT_NAME = "kubelet_internal_checkpoint"

EventSink = Callable[[str], None]
Predicate = Callable[["Kubelet"], bool]


class Kubelet:
    """The device-manager side of the kubelet, on real unix sockets."""

    def __init__(
        self,
        plugin_dir: Path,
        *,
        socket_name: str = DEFAULT_SOCKET_NAME,
        pod_resources_socket: Path | None = None,
        checkpoint_name: str = DEFAULT_CHECKPOINT_NAME,
        on_event: EventSink | None = None,
        plugin_timeout: float = DEFAULT_TIMEOUT,
        plugins_registry_dir: Path | None = None,
    ) -> None:
        self.plugin_dir = Path(plugin_dir)
        # Where the plugin watcher looks for registration sockets; None: no plugin watcher.
        self.plugins_registry_dir = (
            None if plugins_registry_dir is None else Path(plugins_registry_dir)
        )
        self._plugin_watcher: PluginWatcher | None = None
        # DRA drivers the plugin watcher registered (type DRAPlugin), by driver name.
        self.dra = DraDrivers(on_change=self._notify)
        self.socket_path = self.plugin_dir / socket_name
        self.pod_resources_socket = pod_resources_socket
        self.checkpoint_path = self.plugin_dir / checkpoint_name
        self.checkpoint_error: CheckpointError | None = None
        self._on_event = on_event
        self._resources: dict[str, ResourceState] = {}
        self._plugins = PluginHandler(
            self.plugin_dir,
            self._resources,
            plugin_timeout=plugin_timeout,
            event=self._event,
            notify=self._notify,
            spawn=self._spawn,
            running=lambda: self._running,
        )
        self._book = AllocationBook()
        self._locks: dict[str, asyncio.Lock] = {}
        self._servers = SocketServers()
        self._background: set[asyncio.Task[None]] = set()
        self._changes = Changes()
        self._running = False

    # -- state -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    @property
    def plugin_timeout(self) -> float:
        """Seconds each call to a plugin may take."""
        return self._plugins.plugin_timeout

    @property
    def registrations(self) -> list[Registration]:
        """Every registration accepted since the emulator was made, oldest first."""
        return self._plugins.registrations

    @property
    def rejections(self) -> list[Rejection]:
        """Every registration refused since the emulator was made, oldest first."""
        return self._plugins.rejections

    @property
    def resources(self) -> Mapping[str, ResourceView]:
        """A snapshot of every resource registered since the last start."""
        return {name: state.view() for name, state in self._resources.items()}

    @property
    def allocations(self) -> list[AllocationRecord]:
        return self._book.records

    def describe(self) -> str:
        """A one-paragraph summary of the state, for logs and timeout messages."""
        regs = ", ".join(f"{r.resource_name} ({r.endpoint})" for r in self.registrations)
        rejs = ", ".join(f"{r.resource_name}: {r.reason}" for r in self.rejections)
        views = "; ".join(v.summary() for v in self.resources.values())
        return (
            f"registrations: [{regs}]; rejections: [{rejs}]; resources: [{views}]; "
            f"allocations: {len(self._book)}"
        )

    def _event(self, line: str) -> None:
        # With a sink the caller shows the line; logging it too would print it twice.
        if self._on_event is not None:
            log.debug("%s", line)
            self._on_event(line)
        else:
            log.info("%s", line)

    def _notify(self) -> None:
        self._changes.notify()

    async def wait_for(
        self, predicate: Predicate, timeout: float = 5.0, *, what: str | None = None
    ) -> None:
        """Return once ``predicate(self)`` holds, re-checking on every state change."""
        await self._changes.wait_until(
            lambda: predicate(self),
            timeout,
            why=lambda: (
                f"{what or describe_predicate(predicate)}; kubelet state: {self.describe()}"
            ),
        )

    async def wait_for_resource(
        self,
        resource: str,
        *,
        allocatable: int | None = None,
        min_updates: int = 1,
        timeout: float = 5.0,
    ) -> ResourceView:
        """Wait until ``resource`` is connected, has reported, and (optionally) has
        ``allocatable`` healthy devices; return its view."""
        wanted = ResourceWanted(resource, allocatable, min_updates)
        await self.wait_for(lambda k: wanted.met(k.resources), timeout, what=str(wanted))
        return self.resources[resource]

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Load the checkpoint, clear stale sockets, serve Registration (and PodResources)."""
        if self._running:
            return
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._resources.clear()
        self._load_checkpoint()
        for path in remove_stale_contents(self.plugin_dir, keep={self.checkpoint_path}):
            log.debug("removed stale %s", path)
        try:
            # A socket that cannot be bound, or a registry the watcher cannot use, stops
            # what already started: a half-started emulator would hold its sockets.
            await self._servers.serve_registration(self._plugins.handle_register, self.socket_path)
            self._running = True
            self._event(f"kubelet registration service listening on {self.socket_path}")
            if self.pod_resources_socket is not None:
                socket = Path(self.pod_resources_socket)
                await self._servers.serve_pod_resources(PodResourcesServicer(self), socket)
                self._event(f"pod resources service listening on {socket}")
            if self.plugins_registry_dir is not None:
                self._plugin_watcher = PluginWatcher(
                    self.plugins_registry_dir,
                    register=self._plugins.register_watched,
                    deregister=self._plugins.deregister_watched,
                    on_event=self._event,
                    dra=self.dra,
                )
                await self._plugin_watcher.start()
        except KubeletError:
            await self.stop()
            raise
        self._notify()

    def _load_checkpoint(self) -> None:
        self.checkpoint_error = None
        try:
            self._book = AllocationBook(checkpoint.read(self.checkpoint_path))
        except CheckpointError as e:
            # As the kubelet does: a broken checkpoint must not keep the node down.
            self.checkpoint_error = e
            self._book = AllocationBook()
            log.warning("continuing without allocations from the checkpoint: %s", e)
            self._event(f"ignored unreadable checkpoint: {e}")

    async def stop(self) -> None:
        """Stop serving and close every plugin stream; safe to call again."""
        self._running = False
        watcher, self._plugin_watcher = self._plugin_watcher, None
        if watcher is not None:
            await watcher.stop()
        await self.dra.close()
        served = await self._servers.stop()
        for state in self._resources.values():
            endpoint = state.endpoint
            if endpoint is not None:
                await endpoint.stop()
            if state.connected or endpoint is not None:
                state.disconnect()
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        if served:
            self._event("kubelet stopped")
        self._notify()

    async def restart(self) -> None:
        """Stop, remove every socket but the checkpoint, and start again.

        Resources are forgotten until their plugins re-register; allocations come
        back from the checkpoint.
        """
        await self.stop()
        remove_stale_contents(self.plugin_dir, keep={self.checkpoint_path})
        await self.start()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- allocation ------------------------------------------------------------------------

    async def allocate(
        self,
        pod: str,
        container: str,
        resource: str,
        count: int,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        must_include: Sequence[str] = (),
        pre_start: bool = True,
    ) -> AllocationRecord:
        """Allocate ``count`` devices of ``resource`` to a container, as at container creation.

        ``must_include`` are devices the container must get (the kubelet's
        reusable devices, e.g. an init container's): they are taken first, and
        GetPreferredAllocation (when advertised) is asked only for the rest,
        with them as its must-include list. Each must be healthy and free, or
        held by another container of the same pod (its init containers' devices,
        which the kubelet lets the next containers reuse).

        PreStartContainer follows Allocate when the plugin requires it; with
        ``pre_start=False`` it is left to the caller, as the kubelet calls it at
        container start (``client(resource).pre_start(...)``).

        A repeated call for the same container and resource returns the existing
        record (a container restart) when ``count`` matches.
        """
        # One allocation per resource at a time: the choice must not race the RPCs.
        async with self._locks.setdefault(resource, asyncio.Lock()):
            existing = self._book.find(namespace, pod, container, resource)
            if existing is not None:
                if len(existing.device_ids) == count:
                    return existing
                raise AllocationConflictError(
                    f"{namespace}/{pod}/{container} holds {len(existing.device_ids)} of "
                    f"{resource}, cannot change the request to {count}"
                )
            record = await allocate_devices(
                self._resources.get(resource),
                self._book,
                namespace,
                pod,
                container,
                resource,
                count,
                list(must_include),
                pre_start,
            )
            records = [*self._book, record]
            try:
                checkpoint.write(self.checkpoint_path, records)
            except OSError as e:
                raise CheckpointError(self.checkpoint_path, f"cannot write: {e}") from None
            self._book.add(record)
        self._event(
            f"allocated {resource} {', '.join(record.device_ids)} to {namespace}/{pod}/{container}"
        )
        self._notify()
        return record

    def client(self, resource: str) -> PluginClient:
        """The client of the connected plugin of ``resource``: the device manager's endpoint."""
        state = self._resources.get(resource)
        if state is None:
            raise UnknownResourceError(f"no plugin has registered resource {resource!r}")
        if state.endpoint is None or not state.connected:
            raise ResourceUnavailableError(f"the plugin of {resource} is not connected")
        return state.endpoint.client

    def release(self, pod: str, *, namespace: str = DEFAULT_NAMESPACE) -> None:
        """Free every device the pod holds (the pod was deleted) and rewrite the checkpoint."""
        freed = self._book.release(namespace, pod)
        if not freed:
            return
        checkpoint.write(self.checkpoint_path, self._book)
        held = ", ".join(f"{r.resource} {'/'.join(r.device_ids)}" for r in freed)
        self._event(f"released {namespace}/{pod}: {held}")
        self._notify()
