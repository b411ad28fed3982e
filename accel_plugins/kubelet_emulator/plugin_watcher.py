"""The kubelet's plugin watcher, for device plugins (pluginregistration v1).

What the kubelet's plugin manager (``pkg/kubelet/pluginmanager``) does, reduced
to the device manager's handler:

- It watches the plugins_registry directory and its subdirectories (inotify),
  created with mode 0755 when missing. A unix socket found there at start, or
  created or moved in later, whose name does not start with ``.``, is a plugin
  to register; any other file is ignored.
- Registering: dial the socket and call GetInfo (1 s deadline). A type other
  than ``DevicePlugin`` has no handler: NotifyRegistrationStatus(false). An
  empty endpoint means the registration socket itself. The device manager's
  handler then validates (one of ``supported_versions`` is one the kubelet
  speaks; the name is an extended resource name): a refusal is notified
  (false, with the reason) and, like the two cases before it, tried again with
  the kubelet's backoff, 0.5 s doubling to 2 min. A valid plugin's endpoint is
  connected as after a Register call (GetDevicePluginOptions, then
  ListAndWatch); when that fails the plugin is notified, and, as in the
  kubelet, whose actual state of the world keeps that socket, not tried again
  until the socket is replaced. Success: NotifyRegistrationStatus(true).
- A socket deleted: the plugin is deregistered (its stream closed, its devices
  unhealthy). A socket created again at a known path (replaced): deregistered,
  then registered anew. A socket renamed away is not a deletion to the kubelet
  (fsnotify reports a rename, which it ignores), nor here.

One operation per socket at a time, as the kubelet's operation executor keeps
it: a newer event for a socket waits for (or cancels) the one before.

With a ``dra`` handler (``accel_plugins.kubelet_emulator.dra.DraDrivers``), plugins of
type ``DRAPlugin`` are registered by it instead, the same way: its refusal is
notified and retried, its success notified, a deleted socket deregistered.
"""

from __future__ import annotations

import asyncio
import logging
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.api import pluginregistration_v1_pb2_grpc as reg_grpc
from accel_plugins.kubelet_emulator.client import unix_target
from accel_plugins.kubelet_emulator.dirwatch import Change, DirWatch
from accel_plugins.kubelet_emulator.dra import DRA_PLUGIN, DraClient, DraDrivers
from accel_plugins.kubelet_emulator.endpoint import Endpoint
from accel_plugins.kubelet_emulator.registration import RegistrationRefusedError

log = logging.getLogger(__name__)

DEVICE_PLUGIN = "DevicePlugin"
DIR_MODE = 0o755
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
RETRY_INITIAL = 0.5
RETRY_MAX = 120.0

# (name, endpoint, supported versions, registration socket) -> the connected endpoint;
# RegistrationRefusedError with INVALID_ARGUMENT for a plugin that fails validation,
# any other code for one that could not be connected.
RegisterPlugin = Callable[[str, str, list[str], Path], Awaitable[Endpoint]]
DeregisterPlugin = Callable[[Endpoint, Path], Awaitable[None]]
EventSink = Callable[[str], None]


def is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


def is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


@dataclass
class _Plugin:
    """The one operation running for a socket, and what it registered."""

    task: asyncio.Task[None] | None = None
    endpoint: Endpoint | None = None
    dra: DraClient | None = None
    gone: bool = False  # the socket was deleted: the task deregisters


class PluginWatcher:
    """Registers the device plugins whose sockets appear in ``directory``."""

    def __init__(
        self,
        directory: Path,
        *,
        register: RegisterPlugin,
        deregister: DeregisterPlugin,
        on_event: EventSink,
        retry_initial: float = RETRY_INITIAL,
        retry_max: float = RETRY_MAX,
        dra: DraDrivers | None = None,
    ) -> None:
        self.directory = Path(directory)
        self._dra = dra
        self._register = register
        self._deregister = deregister
        self._event = on_event
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self._plugins: dict[Path, _Plugin] = {}
        self._watch: DirWatch | None = None

    @property
    def sockets(self) -> list[Path]:
        """The sockets registered now (those whose registration succeeded)."""
        return sorted(
            p
            for p, w in self._plugins.items()
            if (w.endpoint is not None or w.dra is not None) and not w.gone
        )

    async def start(self) -> None:
        self.directory.mkdir(DIR_MODE, parents=True, exist_ok=True)
        self._watch = DirWatch(self._on_change)
        self._traverse(self.directory)
        self._event(f"plugin watcher watching {self.directory}")

    async def stop(self) -> None:
        """Stop watching and cancel every operation; endpoints are the kubelet's to close."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()
        tasks = [p.task for p in self._plugins.values() if p.task is not None]
        self._plugins.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- discovery ----------------------------------------------------------------------

    def _traverse(self, directory: Path) -> None:
        """Watch ``directory`` and what is under it; each socket found is registered."""
        if self._watch is None:
            return
        self._watch.add(directory)
        try:
            entries = sorted(directory.iterdir())
        except OSError as e:
            log.error("plugin watcher: cannot list %s: %s", directory, e)
            return
        for entry in entries:
            self._found(entry)

    def _found(self, path: Path) -> None:
        if path.name.startswith("."):
            return  # as the kubelet: files starting with "." are not plugins
        if is_dir(path):
            self._traverse(path)
        elif is_socket(path):
            self._appeared(path)

    def _on_change(self, change: Change, path: Path) -> None:
        if change is Change.CREATED:
            self._found(path)
        elif change is Change.REMOVED:
            self._vanished(path)
        else:
            self._rescan()

    def _rescan(self) -> None:
        """After lost events: forget sockets that are gone, register unknown ones."""
        for path in list(self._plugins):
            if not is_socket(path):
                self._vanished(path)
        for path in sorted(self.directory.rglob("*")):
            if is_socket(path) and path not in self._plugins:
                self._found(path)

    def _appeared(self, path: Path) -> None:
        before = self._plugins.get(path)
        plugin = _Plugin()
        self._plugins[path] = plugin
        plugin.task = asyncio.create_task(
            self._replace(before, plugin, path), name=f"plugin watcher {path.name}"
        )

    def _vanished(self, path: Path) -> None:
        before = self._plugins.get(path)
        if before is None or before.gone:
            return
        plugin = _Plugin(gone=True)
        self._plugins[path] = plugin
        plugin.task = asyncio.create_task(self._forget(before, path), name=f"forget {path.name}")
        plugin.task.add_done_callback(lambda _: self._drop(path, plugin))

    def _drop(self, path: Path, plugin: _Plugin) -> None:
        if self._plugins.get(path) is plugin:
            del self._plugins[path]

    # -- operations -----------------------------------------------------------------------

    async def _forget(self, before: _Plugin, path: Path) -> None:
        task = before.task
        if task is not None and not before.gone:
            task.cancel()
        if task is not None:
            await asyncio.wait([task])
        if before.endpoint is not None:
            await self._deregister(before.endpoint, path)
            before.endpoint = None
        if before.dra is not None and self._dra is not None:
            await self._dra.deregister(before.dra, path)
            self._event(f"plugin watcher: DRA driver {before.dra.driver} deregistered ({path})")
            before.dra = None

    async def _replace(self, before: _Plugin | None, plugin: _Plugin, path: Path) -> None:
        if before is not None:
            if not before.gone and before.endpoint is not None:
                self._event(f"plugin watcher: {path} was replaced; registering it anew")
            await self._forget(before, path)
        delay = self.retry_initial
        while not await self._register_once(plugin, path):
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_max)

    async def _register_once(self, plugin: _Plugin, path: Path) -> bool:
        """One attempt; False when the kubelet would try again (after its backoff)."""
        async with grpc.aio.insecure_channel(unix_target(path)) as channel:
            stub = reg_grpc.RegistrationStub(channel)
            try:
                info = await stub.GetInfo(
                    reg.InfoRequest(), timeout=GET_INFO_TIMEOUT, wait_for_ready=True
                )
            except grpc.aio.AioRpcError as e:
                self._event(f"plugin watcher: GetInfo on {path} failed: {e.code().name}")
                return False
            if info.type == DRA_PLUGIN and self._dra is not None:
                return await self._register_dra(stub, plugin, path, info)
            if info.type != DEVICE_PLUGIN:
                reason = f"no handler registered for plugin type: {info.type} at socket {path}"
                await self._notify(stub, path, False, f"RegisterPlugin error -- {reason}")
                return False
            endpoint = info.endpoint or str(path)
            try:
                plugin.endpoint = await self._register(
                    info.name, endpoint, list(info.supported_versions), path
                )
            except RegistrationRefusedError as e:
                if e.code == grpc.StatusCode.INVALID_ARGUMENT:
                    error = f"plugin validation failed with err: {e.reason}"
                    await self._notify(stub, path, False, f"RegisterPlugin error -- {error}")
                    return False
                error = f"plugin registration failed with err: {e.reason}"
                await self._notify(stub, path, False, f"RegisterPlugin error -- {error}")
                return True  # kept as attempted until the socket changes, as the kubelet does
            await self._notify(stub, path, True, "")
            return True

    async def _register_dra(
        self,
        stub: reg_grpc.RegistrationAsyncStub,
        plugin: _Plugin,
        path: Path,
        info: reg.PluginInfo,
    ) -> bool:
        assert self._dra is not None
        endpoint = info.endpoint or str(path)
        try:
            plugin.dra = await self._dra.register(
                info.name, endpoint, list(info.supported_versions), path
            )
        except RegistrationRefusedError as e:
            error = f"plugin validation failed with err: {e.reason}"
            await self._notify(stub, path, False, f"RegisterPlugin error -- {error}")
            return False
        self._event(f"plugin watcher: DRA driver {info.name} registered ({endpoint})")
        await self._notify(stub, path, True, "")
        return True

    async def _notify(
        self, stub: reg_grpc.RegistrationAsyncStub, path: Path, registered: bool, error: str
    ) -> None:
        status = reg.RegistrationStatus(plugin_registered=registered, error=error)
        try:
            await stub.NotifyRegistrationStatus(status, timeout=NOTIFY_TIMEOUT)
        except grpc.aio.AioRpcError as e:
            self._event(f"plugin watcher: NotifyRegistrationStatus on {path} failed: {e.code()}")
            return
        if not registered:
            self._event(f"plugin watcher: {path} not registered: {error}")
