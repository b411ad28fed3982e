"""A backend served as a DRA driver: the kubelet side of ``--kubelet-api dra``.

The same backend as in device-plugin mode, the same trees, a different way
out: instead of one device plugin server per resource, one socket
(``<kubelet-plugins-dir>/<driver>/dra.sock``) serving DRAPlugin v1 and v1beta1
and DRAResourceHealth, registered through the kubelet's plugin watcher.
Every tree updates the devices claims are prepared from, the health stream,
and (through the API side's SlicePublisher) the node's ResourceSlices.

What a backend run does here mirrors the device-plugin manager: a crash or
return rebuilds it with backoff (its devices reported unhealthy meanwhile),
SIGHUP builds a new one and swaps it in only when that succeeds, and an
invalid device ID in a tree stops the driver (exit 2). Sockets removed behind
our back are served again at once (inotify), as a kubelet restart expects.
Prepared claims, their CDI specs and the slices stay in place on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from accel_plugins.dra.capabilities import NONE as NO_CAPABILITIES
from accel_plugins.dra.capabilities import DraCapabilities
from accel_plugins.dra.checkpoint import BOOT_ID_PATH, Checkpoint, read_boot_id
from accel_plugins.dra.health import HealthFeed
from accel_plugins.dra.instances import Instance, dra_socket_name
from accel_plugins.dra.model import ClaimSource, SlicePublisher, device_names, with_shared_units
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.dra.publish_turn import PublishTurn
from accel_plugins.dra.registration_socket import DraRegistrationServicer, registration_socket_name
from accel_plugins.dra.request_metrics import RequestMetrics
from accel_plugins.dra.service import DraServer
from accel_plugins.errors import ConfigError, InvalidSnapshotError
from accel_plugins.plugin.backend import Backend, Warmer
from accel_plugins.plugin.cdi import DEFAULT_SPEC_DIR
from accel_plugins.plugin.command import BackendFactory
from accel_plugins.plugin.device import Device, DeviceTree
from accel_plugins.plugin.dra_names import dra_device_name
from accel_plugins.plugin.dra_taints import TaintId, taint_of
from accel_plugins.runtime.backoff import Backoff
from accel_plugins.runtime.cordon import Cordons
from accel_plugins.runtime.health_changes import HealthWatch, all_unhealthy
from accel_plugins.runtime.plugin_watcher import RegistrationServer
from accel_plugins.runtime.server import ServeError
from accel_plugins.runtime.supervisor import RuntimeSettings, Supervisor
from accel_plugins.util.flock import FileLock
from accel_plugins.util.k8snames import DNS1123_SUBDOMAIN_MAX, DNS1123_SUBDOMAIN_RE
from accel_plugins.util.watch import DirEvent, DirWatcher, watch_directories

log = logging.getLogger(__name__)

DEFAULT_KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
CHECKPOINT_NAME = "checkpoint.json"
SERIALIZE_LOCK = "serialize.lock"  # the kubeletplugin library's name for the same lock
# How long a stopping driver lets the kubelet's calls in flight finish (a pod's default
# termination grace is 30 s).
DRAIN_TIMEOUT = 10.0
DIR_MODE = 0o750


def _default_name(_resource: str, device: Device) -> str | None:
    return dra_device_name(device.id)


def driver_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a DRA driver (a DNS subdomain, as ResourceSlice.spec.driver)."""
    if not name:
        return "must not be empty"
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    if not DNS1123_SUBDOMAIN_RE.fullmatch(name):
        return (
            "must be a DNS subdomain: lowercase alphanumerics, '-' and '.', starting and "
            "ending with an alphanumeric"
        )
    return None


@dataclass(frozen=True)
class DraSettings(RuntimeSettings):
    """Where the driver meets the kubelet. Paths are parameters so tests use temp dirs.

    Supervision, the hook deadline, retry pacing and the plugin watcher's directory are
    the fields both modes share
    (:class:`~accel_plugins.runtime.supervisor.RuntimeSettings`).
    """

    driver_name: str
    node_name: str
    kubelet_plugins_dir: Path = DEFAULT_KUBELET_PLUGINS_DIR
    cdi_spec_dir: Path = DEFAULT_SPEC_DIR
    boot_id_path: Path = BOOT_ID_PATH  # tells a reboot apart from a plugin restart
    health_refresh: float = 10.0
    # The pod's UID when the old and new pod of a rolling update serve side by side
    # (sockets named after it, instances.py); "" for the fixed socket names.
    instance_uid: str = ""

    def __post_init__(self) -> None:
        problem = driver_name_problem(self.driver_name)
        if problem is not None:
            raise ConfigError("--dra-driver-name", "", f"{self.driver_name!r}: {problem}")
        if not self.node_name:
            raise ConfigError("--node-name", "", "required with --kubelet-api dra (env NODE_NAME)")

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_plugins_dir / self.driver_name

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / dra_socket_name(self.instance_uid)

    @property
    def checkpoint_path(self) -> Path:
        return self.plugin_dir / CHECKPOINT_NAME

    @property
    def registration_socket(self) -> Path:
        return self.plugins_registry_dir / registration_socket_name(
            self.driver_name, self.instance_uid
        )


class DraDriver:
    """Runs a backend and serves it to the kubelet as the DRA driver ``settings.driver_name``."""

    def __init__(
        self,
        factory: BackendFactory,
        settings: DraSettings,
        claims: ClaimSource,
        slices: SlicePublisher | None = None,
        cordons: Cordons | None = None,
        requests: RequestMetrics | None = None,  # counts and times Prepare and Unprepare
    ) -> None:
        self._cordons = cordons
        self._requests = requests
        self._raw: DeviceTree = {}  # as the backend published it; _tree has the cordons
        if cordons is not None:
            cordons.subscribe(lambda: self._on_tree(self._raw))
        self.settings = settings
        self._slices = slices
        self._inventory = Inventory(hook_timeout=settings.hook_timeout)
        self._dra = NO_CAPABILITIES  # the running backend's, looked up once in _use
        self._tree: DeviceTree = {}
        self._supervisor = Supervisor(factory, settings, self)
        self._fatal: InvalidSnapshotError | None = None
        self._stop = asyncio.Event()
        # Run on stop while the sockets still serve, after slice publishing stopped: the
        # per-node switch withdraws the slices here, so the device plugin (which waits for
        # dra.sock to go) never starts while they exist.
        self.before_unserve: Callable[[], Awaitable[None]] | None = None
        self._check = asyncio.Event()
        self._slices_due = asyncio.Event()
        self._has_tree = False  # the backend has published a tree (an empty one counts)
        self.instance = Instance(
            settings.plugin_dir,
            settings.plugins_registry_dir,
            settings.driver_name,
            settings.instance_uid,
        )
        self.turn = PublishTurn(self.instance)
        self.feed = HealthFeed(settings.node_name, refresh=settings.health_refresh)
        self.health = HealthWatch()
        """Every served tree's health changes, for sinks such as Node Events."""
        self.preparer = Preparer(
            driver=settings.driver_name,
            pool=settings.node_name,
            claims=claims,
            cdi_dir=settings.cdi_spec_dir,
            checkpoint=Checkpoint(
                settings.checkpoint_path, settings.driver_name, read_boot_id(settings.boot_id_path)
            ),
            inventory=lambda: self._inventory,
            taint=self._taint_of,
            shared=FileLock(settings.plugin_dir / SERIALIZE_LOCK)
            if settings.instance_uid
            else None,
        )
        self._server: DraServer | None = None
        self._registration: RegistrationServer | None = None
        self._token: object | None = None
        self.registered = False
        self._accepted = asyncio.Event()  # set while the kubelet has registered the socket
        self._reg_backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        self._reoffer: asyncio.TimerHandle | None = None
        self.ready = asyncio.Event()  # set once the socket and registration are served

    @property
    def tree(self) -> DeviceTree:
        return self._tree

    @property
    def inventory(self) -> Inventory:
        return self._inventory

    @property
    def backend(self) -> Backend | None:
        """The backend running now (None before the first and between restarts)."""
        return self._supervisor.backend

    # -- public ------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until stop(); InvalidSnapshotError when the backend publishes a bad tree."""
        settings = self.settings
        for directory in (settings.plugin_dir, settings.plugins_registry_dir):
            directory.mkdir(DIR_MODE, parents=True, exist_ok=True)
        try:
            if await self._admitted():
                self.instance.sweep()
                await self._serve()
        finally:
            self.turn.close()
            self.instance.stop()
        if self._fatal is not None:
            raise self._fatal

    async def _admitted(self) -> bool:
        """Hold this instance's lock; False when stopped while another instance held it."""
        where = f"{self.settings.driver_name} serves {self.settings.socket_path}"
        return await self.instance.admitted(self._stop, where)

    async def _serve(self) -> None:
        watcher = self._watch()
        cordon_watch = self._cordons.try_watch() if self._cordons is not None else None
        tasks = [asyncio.create_task(self._supervisor.run(), name="backend supervisor")]
        if self._slices is not None:
            tasks.append(asyncio.create_task(self._publish_slices(), name="slices"))
        if watcher is None:
            tasks.append(asyncio.create_task(self._periodic_check(), name="socket check"))
        try:
            # Before the kubelet can ask: after a reboot the claims' specs are gone.
            await self.preparer.restore()
            await self._serve_sockets()
            self.ready.set()
            tasks.append(asyncio.create_task(self._warm(), name="warm-up"))
            while not self._stop.is_set():
                stop = asyncio.ensure_future(self._stop.wait())
                check = asyncio.ensure_future(self._check.wait())
                await asyncio.wait({stop, check}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                check.cancel()
                if self._check.is_set() and not self._stop.is_set():
                    self._check.clear()
                    await self._serve_sockets()
        finally:
            if watcher is not None:
                watcher.close()
            if cordon_watch is not None:
                cordon_watch.close()
            if self._reoffer is not None:
                self._reoffer.cancel()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self.before_unserve is not None:
                if self._slices is not None:
                    await self._slices.close()  # no repair of what the hook deletes
                await self.before_unserve()
            if not await self.preparer.drained(DRAIN_TIMEOUT):
                log.warning("stopping with Prepare or Unprepare calls still running")
            await self._stop_registration()
            self.feed.close()  # health streams end now, not after the server's grace
            if self._server is not None:
                await self._server.stop()
                self._server = None
            if self._slices is not None:
                await self._slices.close()

    def stop(self) -> None:
        """Ask run() to return (it removes our sockets; claims and specs stay)."""
        self._stop.set()

    def reload(self) -> None:
        """Build the backend again from its configuration (SIGHUP); a failure keeps the old."""
        self._supervisor.reload()

    async def wait_registered(self) -> None:
        """Return once the kubelet's plugin watcher has registered the driver."""
        await self._accepted.wait()

    @property
    def standby(self) -> str | None:
        """Why it waits to serve (another instance serves); None when it serves."""
        return self.instance.standby

    def problems(self) -> list[str]:
        """What keeps the driver from working now (for /healthz and logs)."""
        if self.standby is not None:
            return []  # alive, and ready: a rollout waits on it
        found = []
        if self._server is None or not self._server.socket_alive():
            found.append(f"{self.settings.socket_path} is not served")
        if self._registration is None or not self._registration.socket_alive():
            found.append(f"{self.settings.registration_socket} is not served")
        elif not self.registered:
            found.append("not registered by the kubelet's plugin watcher yet")
        return found

    # -- the backend ---------------------------------------------------------------

    async def _warm(self) -> None:
        """Load ahead, in worker threads, what the first Prepare would load on the way
        (the file-writing helpers, the backend's allocate modules: see Warmer)."""
        await asyncio.to_thread(importlib.import_module, "tempfile")  # atomic_write_text's
        backend = self._supervisor.backend
        if isinstance(backend, Warmer):
            try:
                await asyncio.to_thread(backend.warm)
            except Exception:
                log.exception("warming the backend up failed; its first calls load what they need")

    def _taint_of(self, resource: str, device: Device) -> TaintId:
        return taint_of(self.settings.driver_name, self._dra.keyer, resource, device)

    # -- BackendEvents: what the supervisor tells the driver ------------------------

    def backend_started(self, backend: Backend) -> None:
        dra = self._dra = DraCapabilities.of(backend, hook_timeout=self.settings.hook_timeout)
        self._inventory = Inventory(
            self._inventory.devices,
            dra.common.allocator,
            dra.common.hook_timeout,
            dra.common.cdi_keeper,
            dra.configurer,
            dra.share_limits,
        )

    def tree_published(self, tree: DeviceTree) -> None:
        self._on_tree(tree)

    def backend_died(self) -> None:
        self._dra = NO_CAPABILITIES
        # Nobody watches the hardware now: say so rather than keep promising health.
        self._on_tree({r: all_unhealthy(ds) for r, ds in self._raw.items()})

    def snapshot_invalid(self, error: InvalidSnapshotError) -> None:
        self._fatal = error
        self._stop.set()

    @property
    def capabilities(self) -> DraCapabilities:
        """The running backend's DRA capabilities (none between backends)."""
        return self._dra

    def _on_tree(self, tree: DeviceTree) -> None:
        self._raw = tree
        if self._cordons is not None:
            tree = self._cordons.apply(tree, self._supervisor.backend, _default_name)
        self._tree = tree
        # Shared devices' names too: where the slices offer a device for several claims.
        named = with_shared_units(device_names(tree, self._dra.namer), self._dra.sharer)
        self._inventory = dataclasses.replace(self._inventory, devices=named)
        self.feed.update(named)
        self.health.observe(tree)
        self._has_tree = True
        self._slices_due.set()

    async def _publish_slices(self) -> None:
        """Publish while this instance has the turn (publish_turn.py): the newest does."""
        assert self._slices is not None
        await self.turn.run(self._publish_trees, self._slices.close)

    async def _publish_trees(self) -> None:
        """Hand the latest tree to the API side; trees that arrive meanwhile coalesce."""
        assert self._slices is not None
        if self._has_tree:  # the turn came back: publish what there is (else the first tree)
            self._slices_due.set()
        while True:
            await self._slices_due.wait()
            self._slices_due.clear()
            try:
                await self._slices.publish(self._tree)
            except Exception:
                # Its own retries failed loudly; the kubelet side serves on regardless.
                log.exception("publishing ResourceSlices failed")

    # -- sockets ------------------------------------------------------------------

    async def _serve_sockets(self) -> None:
        """Serve dra.sock and the registration socket where either is missing."""
        settings = self.settings
        if self._server is None or not self._server.socket_alive():
            if self._server is not None:
                await self._server.stop()
            self._server = DraServer(self.preparer, self.feed, settings.socket_path, self._requests)
            try:
                await self._server.start()
            except ServeError as exc:
                self._server = None
                log.error("%s; trying again in %gs", exc, settings.check_interval)
                self._check_later(settings.check_interval)
                return
            log.info("DRA driver %s: serving %s", settings.driver_name, settings.socket_path)
        if self._registration is None or not self._registration.socket_alive():
            await self._offer()

    async def _offer(self) -> None:
        """Serve a new registration socket: the kubelet registers each one it sees once."""
        settings = self.settings
        await self._stop_registration()
        token = self._token = object()
        servicer = DraRegistrationServicer(
            settings.driver_name,
            str(settings.socket_path.absolute()),
            functools.partial(self._on_status, token),
        )
        registration = RegistrationServer(servicer, settings.registration_socket)
        try:
            await registration.start()
        except ServeError as exc:
            self._token = None
            log.error("%s; trying again in %gs", exc, settings.check_interval)
            self._check_later(settings.check_interval)
            return
        self._registration = registration
        log.info("DRA driver %s: serving %s", settings.driver_name, settings.registration_socket)

    async def _stop_registration(self) -> None:
        registration, self._registration = self._registration, None
        self.registered = False
        self._accepted.clear()
        self._token = None
        if registration is not None:
            await registration.stop()

    def _on_status(self, token: object, registered: bool, error: str) -> None:
        if token is not self._token:
            return  # news about a socket we no longer serve
        if not registered:
            self._accepted.clear()
        self.registered = registered
        if registered:
            self._accepted.set()
            self._reg_backoff.reset()
            log.info("DRA driver %s: registered by the kubelet", self.settings.driver_name)
            return
        delay = self._reg_backoff.next_delay()
        log.warning(
            "DRA driver %s: the kubelet did not register it (%s); offering a new socket in %.1fs",
            self.settings.driver_name,
            error or "no reason given",
            delay,
        )
        if self._reoffer is None:
            self._reoffer = asyncio.get_running_loop().call_later(delay, self._offer_again)

    def _offer_again(self) -> None:
        self._reoffer = None
        # Removing the socket makes the next check offer a fresh one.
        if self._registration is not None:
            with contextlib.suppress(FileNotFoundError):
                self._registration.socket_path.unlink()
        self._check.set()

    def _check_later(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(delay, self._check.set)

    def _watch(self) -> DirWatcher | None:
        ours = {
            (self.settings.plugin_dir, self.settings.socket_path.name),
            (self.settings.plugins_registry_dir, self.settings.registration_socket.name),
        }

        def on_event(event: DirEvent) -> None:
            if event.overflow or (event.removed and (event.directory, event.name) in ours):
                self._check.set()

        return watch_directories(
            {d for d, _ in ours}, on_event, check_interval=self.settings.check_interval
        )

    async def _periodic_check(self) -> None:
        while True:
            await asyncio.sleep(self.settings.check_interval)
            self._check.set()
