"""Runs one plugin per resource and keeps them registered with the kubelet.

The manager consumes snapshots from the backend and diffs them against what
it serves: resources appear (start + register), change (update the streams)
or vanish (stop). It watches the kubelet's socket directory so a kubelet
restart, seen either as kubelet.sock being re-created or as our own socket
being removed, leads to re-serving and re-registering within milliseconds.
With ``registration="plugin-watcher"`` the kubelet's plugin watcher registers
each resource through a socket in the plugins_registry directory instead
(plugin_watcher.py); the manager then watches that directory too.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from accel_plugins.deviceplugin.lifecycle import ResourcePlugin
from accel_plugins.errors import AccelPluginsError, ConfigError, InvalidSnapshotError
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.command import BackendFactory
from accel_plugins.plugin.device import Device, DeviceTree
from accel_plugins.runtime.backoff import Backoff
from accel_plugins.runtime.capabilities import Capabilities
from accel_plugins.runtime.cordon import Cordons
from accel_plugins.runtime.health_changes import HealthWatch, all_unhealthy
from accel_plugins.runtime.kubelet_restarts import KubeletRestarts
from accel_plugins.runtime.recorder import NO_METRICS, PluginMetrics, PluginStatus, RestartReason
from accel_plugins.runtime.reload_status import ReloadStatus
from accel_plugins.runtime.server import ServeError, socket_name
from accel_plugins.runtime.supervisor import RuntimeSettings, Supervisor
from accel_plugins.util.watch import DirEvent, DirWatcher, watch_directories

log = logging.getLogger(__name__)

DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET_NAME = "kubelet.sock"
# The kubelet's own mode for its socket directory, for when the plugin has to create it
# (0777 less the umask otherwise: world-writable under umask 0). Existing ones are left alone.
PLUGIN_DIR_MODE = 0o750

# How a resource gets registered: by calling Register on kubelet.sock, or by serving
# the kubelet's plugin watcher a registration socket in plugins_registry_dir.
RegistrationMode = Literal["kubelet", "plugin-watcher"]
REGISTRATION_MODES: tuple[str, ...] = get_args(RegistrationMode)


@dataclass(frozen=True, slots=True)
class ManagerSettings(RuntimeSettings):
    """How the manager reaches the kubelet. Paths are parameters so tests use temp dirs.

    Supervision, the hook deadline, retry pacing and the plugin watcher's directory are
    the fields both modes share
    (:class:`~accel_plugins.runtime.supervisor.RuntimeSettings`).
    """

    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    kubelet_socket: Path | None = None  # default: <plugin_dir>/kubelet.sock
    socket_prefix: str = ""  # before <domain>_<name>.sock (server.socket_name)
    register_timeout: float = 5.0
    registration: RegistrationMode = "kubelet"

    def __post_init__(self) -> None:
        if self.registration not in REGISTRATION_MODES:
            raise ConfigError(
                "registration",
                "",
                f"{self.registration!r} is not one of {', '.join(REGISTRATION_MODES)}",
            )

    @property
    def kubelet_socket_path(self) -> Path:
        return self.kubelet_socket or self.plugin_dir / KUBELET_SOCKET_NAME

    @property
    def plugin_watcher(self) -> bool:
        return self.registration == "plugin-watcher"


class _Event(enum.Enum):
    TREE = "tree"
    KUBELET_CREATED = "kubelet-created"
    CHECK = "check"
    RELOAD = "reload"
    BACKEND_STARTED = "backend-started"
    STOP = "stop"


class Manager:
    def __init__(
        self,
        backend_factory: BackendFactory,
        settings: ManagerSettings,
        *,
        metrics: PluginMetrics = NO_METRICS,
        cordons: Cordons | None = None,
    ) -> None:
        self._cordons = cordons
        self._served: DeviceTree = {}  # the backend's tree with the cordons laid over it
        if cordons is not None:
            cordons.subscribe(lambda: self._post(_Event.TREE))
        self.settings = settings
        self._metrics = metrics
        self._kubelet_restarts = KubeletRestarts(lambda: self._metrics.kubelet_restarted())
        self._plugins: dict[str, ResourcePlugin] = {}
        self._tree: DeviceTree = {}
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        self._pending: set[_Event] = set()
        self._supervisor = Supervisor(backend_factory, settings, self)
        self._capabilities = Capabilities(hook_timeout=settings.hook_timeout)
        self._fatal: InvalidSnapshotError | None = None
        self._stopped = asyncio.Event()
        self._running = False
        self._reloads = ReloadStatus(last_success=time.time())
        self.health = HealthWatch()
        """Every served tree's health changes, for sinks such as Node Events."""

    # -- public --------------------------------------------------------------

    async def run(self) -> None:
        """Serve until stop().

        A backend that cannot be built, crashes or returns is rebuilt with
        backoff; an invalid resource name or device ID in a snapshot stops
        serving and raises InvalidSnapshotError (a ConfigError) from here.
        """
        self._running = True
        self._fatal = None
        self.settings.plugin_dir.mkdir(PLUGIN_DIR_MODE, parents=True, exist_ok=True)
        if self.settings.plugin_watcher:
            self.settings.plugins_registry_dir.mkdir(PLUGIN_DIR_MODE, parents=True, exist_ok=True)
        watcher = self._watch()
        cordon_watch = self._cordons.try_watch() if self._cordons is not None else None
        self._kubelet_restarts.checked(self._kubelet_identity())
        supervisor = asyncio.create_task(self._supervisor.run(), name="backend supervisor")
        # Without inotify a timer stands in for the events; with it, an idle
        # plugin does not wake up at all.
        checker = (
            asyncio.create_task(self._periodic_check(), name="socket check")
            if watcher is None
            else None
        )
        try:
            while True:
                event = await self._queue.get()
                self._pending.discard(event)
                if event is _Event.STOP:
                    break
                try:
                    await self._handle(event)
                except AccelPluginsError as exc:
                    log.error("%s", exc)
        finally:
            if checker is not None:
                checker.cancel()
            if watcher is not None:
                watcher.close()
            if cordon_watch is not None:
                cordon_watch.close()
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
            for plugin in list(self._plugins.values()):
                await plugin.stop()
            self._plugins.clear()
            self._running = False
            self._stopped.set()
        if self._fatal is not None:
            raise self._fatal

    async def stop(self) -> None:
        """Stop serving, remove our sockets, and return once run() has finished."""
        if not self._running:
            return
        self._post(_Event.STOP)
        await self._stopped.wait()

    def reload(self) -> None:
        """Rebuild the backend from its configuration (what SIGHUP does)."""
        self._post(_Event.RELOAD)

    @property
    def reload_status(self) -> ReloadStatus:
        """How configuration reloads went (replaced whole: safe to read from any thread)."""
        return self._reloads

    def status(self) -> Mapping[str, PluginStatus]:
        return {name: plugin.status() for name, plugin in sorted(self._plugins.items())}

    @property
    def tree(self) -> DeviceTree:
        return self._served

    @property
    def backend(self) -> Backend | None:
        """The backend running now (None before the first and between restarts)."""
        return self._supervisor.backend

    async def problems(self, timeout: float = 1.0) -> list[str]:
        """What keeps a resource from working: not served, not registered, not answering."""
        plugins = list(self._plugins.values())
        found = await asyncio.gather(*(p.problem(timeout) for p in plugins))
        return [
            f"{p.resource}: {problem}" for p, problem in zip(plugins, found, strict=True) if problem
        ]

    # -- events ----------------------------------------------------------------

    def _post(self, event: _Event) -> None:
        # Coalesce: ten snapshots in a burst become one diff against the latest.
        if event not in self._pending:
            self._pending.add(event)
            self._queue.put_nowait(event)

    async def _handle(self, event: _Event) -> None:
        if event is _Event.TREE:
            await self._apply(self._tree)
        elif event is _Event.KUBELET_CREATED:
            self._on_kubelet_started()
        elif event is _Event.CHECK:
            await self._check()
        elif event is _Event.RELOAD:
            await self._reload()
        elif event is _Event.BACKEND_STARTED:
            await self._use_capabilities()

    def _watch(self) -> DirWatcher | None:
        kubelet_socket = self.settings.kubelet_socket_path
        dirs = {self.settings.plugin_dir, kubelet_socket.parent}
        if self.settings.plugin_watcher:
            dirs.add(self.settings.plugins_registry_dir)  # our registration sockets
        return watch_directories(
            dirs,
            self._on_dir_event,
            check_interval=self.settings.check_interval,
            create_mode=PLUGIN_DIR_MODE,
        )

    def _on_dir_event(self, event: DirEvent) -> None:
        kubelet_socket = self.settings.kubelet_socket_path
        if event.overflow or not event.name:
            self._post(_Event.CHECK)
        elif event.created and event.directory / event.name == kubelet_socket:
            self._post(_Event.KUBELET_CREATED)
        elif event.removed and event.name in self._socket_names():
            self._post(_Event.CHECK)

    def _socket_names(self) -> set[str]:
        return {socket_name(r, self.settings.socket_prefix) for r in self._plugins}

    def _check_later(self) -> None:
        """One socket check after check_interval (a failed serve, with or without inotify)."""
        asyncio.get_running_loop().call_later(
            self.settings.check_interval, self._post, _Event.CHECK
        )

    async def _periodic_check(self) -> None:
        while True:
            await asyncio.sleep(self.settings.check_interval)
            self._post(_Event.CHECK)

    def _kubelet_identity(self) -> int | None:
        try:
            return self.settings.kubelet_socket_path.stat().st_ino
        except FileNotFoundError:
            return None

    def _on_kubelet_started(self) -> None:
        identity = self._kubelet_identity()
        self._kubelet_restarts.created(identity)
        for plugin in self._plugins.values():
            # A new kubelet forgets every plugin: register again, right now.
            plugin.kubelet_started(identity)
        self._post(_Event.CHECK)

    async def _check(self) -> None:
        """Re-serve plugins whose socket vanished; re-register after a kubelet change."""
        identity = self._kubelet_identity()
        self._kubelet_restarts.checked(identity)
        for plugin in list(self._plugins.values()):
            if not plugin.serving:
                log.info(
                    "resource %s: socket %s is gone (kubelet restart?); serving again",
                    plugin.resource,
                    plugin.socket_path,
                )
                try:
                    await plugin.restart(RestartReason.SOCKET_REMOVED)
                except ServeError as exc:
                    log.error(
                        "resource %s: %s; trying again in %gs",
                        plugin.resource,
                        exc,
                        self.settings.check_interval,
                    )
                    self._check_later()
            else:
                plugin.check_registration(identity)

    # -- snapshots -------------------------------------------------------------

    async def _apply(self, tree: DeviceTree) -> None:
        if self._cordons is not None:
            tree = self._cordons.apply(tree, self._supervisor.backend)
        self._served = tree
        self.health.observe(tree)
        for resource in sorted(set(self._plugins) - set(tree)):
            log.info("resource %s: gone from the backend", resource)
            await self._plugins.pop(resource).stop()
        for resource, devices in sorted(tree.items()):
            plugin = self._plugins.get(resource)
            if plugin is not None:
                # By content: a backend that republishes an equal list (a rescan
                # that found nothing new) sends the kubelet nothing.
                changed = plugin.devices is not devices and plugin.devices != devices
                # The kubelet reads options only when a plugin registers.
                if changed and plugin.update(devices):
                    await plugin.restart(RestartReason.OPTIONS_CHANGED)
                continue
            plugin = self._new_plugin(resource, devices)
            self._plugins[resource] = plugin
            try:
                await plugin.serve()
            except ServeError as exc:
                # Kept unserved, so the next socket check serves it; the others go on.
                log.error(
                    "resource %s: %s; trying again in %gs",
                    resource,
                    exc,
                    self.settings.check_interval,
                )
                self._check_later()
                continue
            plugin.register()

    def _new_plugin(self, resource: str, devices: Mapping[str, Device]) -> ResourcePlugin:
        settings = self.settings
        name = socket_name(resource, settings.socket_prefix)
        args = (
            resource,
            settings.plugin_dir / name,
            settings.kubelet_socket_path,
            self._capabilities,
            devices,
        )
        backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        if settings.plugin_watcher:
            # Imported only in that mode: the registration service and its protos
            # are not on the default path to registration (issue 17).
            from accel_plugins.deviceplugin.watched_plugin import WatchedResourcePlugin

            return WatchedResourcePlugin(
                *args,
                kubelet_identity=self._kubelet_identity,
                register_timeout=settings.register_timeout,
                backoff=backoff,
                metrics=self._metrics,
                registration_socket=settings.plugins_registry_dir / name,
            )
        return ResourcePlugin(
            *args,
            kubelet_identity=self._kubelet_identity,
            register_timeout=settings.register_timeout,
            backoff=backoff,
            metrics=self._metrics,
        )

    # -- backend (BackendEvents: the supervisor tells the manager) -------------------

    def backend_started(self, backend: Backend) -> None:
        self._capabilities = Capabilities.of(backend, hook_timeout=self.settings.hook_timeout)
        self._post(_Event.BACKEND_STARTED)

    def tree_published(self, tree: DeviceTree) -> None:
        self._tree = tree
        self._post(_Event.TREE)

    def backend_died(self) -> None:
        self._metrics.backend_restarted()
        # Nobody watches the hardware now: say so rather than keep promising health.
        # Marked here, not when the event is handled, so a new backend's first tree
        # (which may be queued by then) is never overwritten.
        self._tree = {resource: all_unhealthy(devices) for resource, devices in self._tree.items()}
        self._post(_Event.TREE)

    def snapshot_invalid(self, error: InvalidSnapshotError) -> None:
        # Logged by whoever reports run()'s error (the CLI: exit 2).
        self._fatal = error
        self._post(_Event.STOP)

    async def _use_capabilities(self) -> None:
        """Every resource calls the running backend's hooks (a new one after a restart
        or reload); one whose options changed is served and registered again."""
        for plugin in self._plugins.values():
            if plugin.set_capabilities(self._capabilities):
                await plugin.restart(RestartReason.OPTIONS_CHANGED)

    async def _reload(self) -> None:
        problem = self._supervisor.reload()
        if problem is None:
            self._reloads = self._reloads.succeeded(time.time())
        else:
            self._reloads = self._reloads.failed(problem)
