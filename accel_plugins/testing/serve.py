"""A backend served by the real framework ``Manager`` against the kubelet emulator.

:class:`ServedBackend` is what the ``accel_serve`` fixture hands a test: it
waits for what the kubelet sees, allocates through the emulator's real path
(GetPreferredAllocation when advertised, then Allocate and PreStartContainer,
as the kubelet does at container creation) and stops cleanly, raising a crash
of the manager instead of hiding it.

This module imports grpc (through the manager and the emulator); the pytest
plugin imports it only inside its fixtures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.kubelet_emulator import AllocationRecord, Kubelet, ResourceView
from accel_plugins.kubelet_emulator.emulator import EventSink
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.command import BackendCommand, BackendContext, BackendFactory, InUse
from accel_plugins.runtime.recorder import NoMetrics

if TYPE_CHECKING:
    from accel_plugins.metrics.server import MetricsServer

__all__ = [
    "Scrape",
    "ServeBackend",
    "ServedBackend",
    "command_factory",
    "emulated_kubelet",
    "short_tempdir",
]

_T = TypeVar("_T")

# What a test needs from the framework by default: quick registration retries.
TEST_SETTINGS: Mapping[str, Any] = {"backoff_max": 0.5}


@contextlib.contextmanager
def short_tempdir(prefix: str = "ap-") -> Iterator[Path]:
    """A temp dir directly under /tmp, removed afterwards.

    Unix socket paths are limited to 107 bytes and pytest's ``tmp_path`` is
    long, so plugin directories live here instead.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def emulated_kubelet(plugin_dir: Path, *, on_event: EventSink | None = None) -> Kubelet:
    """The emulator as the fixtures set it up (not started): PodResources under
    ``<plugin_dir>/pod-resources/kubelet.sock``, a 5 s deadline on each plugin call."""
    return Kubelet(
        plugin_dir,
        pod_resources_socket=plugin_dir / "pod-resources" / "kubelet.sock",
        on_event=on_event,
        plugin_timeout=5.0,
    )


def command_factory(
    command: BackendCommand,
    options: Mapping[str, Any] = {},
    *,
    in_use: InUse | None = None,
    environ: Mapping[str, str] = {},
) -> BackendFactory:
    """Run ``command.build`` as ``accel-plugins <name>`` would; return its backend factory.

    ``options`` are keyed by :attr:`Option.dest` (``dev_root`` for
    ``--dev-root``) and passed as given; an option left out takes its default,
    converted by its ``type`` when the default is text (as on the command
    line). An unknown key is a TypeError. ConfigError from ``build`` propagates.
    """
    known = {option.dest: option for option in command.options}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; the command has {sorted(known)}")
    values: dict[str, Any] = {}
    for dest, option in known.items():
        if dest in options:
            values[dest] = options[dest]
        elif isinstance(option.default, str):
            values[dest] = option.type(option.default)
        else:
            values[dest] = option.default
    context = BackendContext(options=values, in_use=in_use, environ=dict(environ))
    return command.build(context)


class ServeBackend(Protocol):
    """The type of the ``accel_serve`` fixture."""

    async def __call__(
        self,
        backend: Backend | Callable[[], Backend],
        /,
        *,
        expect_crashes: bool = False,
        **settings: Any,
    ) -> ServedBackend: ...


class _CrashCounter(NoMetrics):
    """Counts what the manager reports about its backend; everything else is dropped."""

    def __init__(self) -> None:
        self.backend_restarts = 0

    def backend_restarted(self) -> None:
        self.backend_restarts += 1


# Where the framework serving a backend logs: device-plugin mode and the shared runtime
# (the supervisor's crash reports, the hook rule's failures).
FRAMEWORK_LOGGERS = ("accel_plugins.deviceplugin", "accel_plugins.runtime", "accel_plugins.plugin")


class _ErrorLog(logging.Handler):
    """Keeps the framework's ERROR lines (a backend crash and its traceback summary)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass(frozen=True, slots=True)
class Scrape:
    """One ``GET /metrics`` of a served backend: the text Prometheus would read."""

    text: str

    def value(self, name: str, **labels: str) -> float | None:
        """The first sample called ``name`` (``_total`` included for counters) whose
        labels include ``labels``; None when there is none."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.text):
            for sample in family.samples:
                wanted = all(sample.labels.get(k) == v for k, v in labels.items())
                if sample.name == name and wanted:
                    return float(sample.value)
        return None


class ServedBackend:
    """A backend run by a ``Manager`` on ``plugin_dir``, seen through ``kubelet``.

    Build one with :meth:`start`. ``manager`` and ``task`` (the task running
    ``manager.run()``) are there for tests that poke the framework directly.
    """

    def __init__(
        self,
        manager: Manager,
        kubelet: Kubelet | None,
        *,
        expect_crashes: bool = False,
        recorder: _CrashCounter | None = None,
    ) -> None:
        self.manager = manager
        self.expect_crashes = expect_crashes
        self._kubelet = kubelet
        self._recorder = recorder or _CrashCounter()
        self._errors = _ErrorLog()
        for logger in FRAMEWORK_LOGGERS:
            logging.getLogger(logger).addHandler(self._errors)
        self._pods = itertools.count()
        self._crash_raised = False
        self._stopped = False
        self._metrics: tuple[MetricsServer, str, int] | None = None
        self.task: asyncio.Task[None] = asyncio.create_task(manager.run(), name="accel manager")

    @classmethod
    def start(
        cls,
        backend: Backend | Callable[[], Backend],
        /,
        *,
        plugin_dir: Path,
        kubelet: Kubelet | None = None,
        expect_crashes: bool = False,
        **settings: Any,
    ) -> ServedBackend:
        """Run a Manager for ``backend`` (an instance, reused on every restart, or a
        factory) on ``plugin_dir`` in a task; ``settings`` are other ManagerSettings
        fields. ``kubelet`` is the emulator the waits and allocations go through.
        Needs a running event loop."""
        factory: Callable[[], Backend]
        if isinstance(backend, type) or not isinstance(backend, Backend):
            factory = backend  # a class or a function that builds one
        else:
            instance = backend
            factory = lambda: instance  # noqa: E731

        options: dict[str, Any] = {"plugin_dir": plugin_dir, **TEST_SETTINGS, **settings}
        recorder = _CrashCounter()
        manager = Manager(factory, ManagerSettings(**options), metrics=recorder)
        return cls(manager, kubelet, expect_crashes=expect_crashes, recorder=recorder)

    # -- what the kubelet sees -----------------------------------------------------------

    @property
    def kubelet(self) -> Kubelet:
        """The emulator this backend is served to."""
        if self._kubelet is None:
            raise RuntimeError("this backend is served without a kubelet emulator")
        return self._kubelet

    @property
    def backend_restarts(self) -> int:
        """How often the manager rebuilt the backend after a crash or an early return."""
        return self._recorder.backend_restarts

    @property
    def errors(self) -> list[str]:
        """ERROR lines the framework logged since the start (backend crashes, hook failures)."""
        return list(self._errors.lines)

    def devices(self, resource: str) -> ResourceView:
        """The resource as the kubelet sees it now (KeyError before it registered)."""
        return self.kubelet.resources[resource]

    async def wait_for_devices(
        self,
        resource: str,
        count: int | None = None,
        *,
        healthy: int | None = None,
        timeout: float = 5.0,
    ) -> ResourceView:
        """Wait until the kubelet lists ``count`` devices of ``resource`` (any health)
        and, when given, ``healthy`` of them Healthy; return the resource's view.

        Without ``count`` and ``healthy``, waits for the first device list.
        """

        def ready(k: Kubelet) -> bool:
            view = k.resources.get(resource)
            return (
                view is not None
                and view.connected
                and view.updates >= 1
                and (count is None or view.capacity == count)
                and (healthy is None or view.allocatable == healthy)
            )

        wanted = f"{resource} listed with {'some' if count is None else count} device(s)"
        if healthy is not None:
            wanted += f", {healthy} healthy"
        await self._guard(self.kubelet.wait_for(ready, timeout, what=wanted))
        return self.kubelet.resources[resource]

    async def wait_for_health(
        self, resource: str, device_id: str, health: str = "Healthy", *, timeout: float = 5.0
    ) -> ResourceView:
        """Wait until the kubelet has ``device_id`` with ``health`` ("Healthy",
        "Unhealthy", or a :class:`~accel_plugins.plugin.Health`)."""

        def ready(k: Kubelet) -> bool:
            view = k.resources.get(resource)
            device = view.devices.get(device_id) if view is not None and view.connected else None
            return device is not None and device.health == str(health)

        what = f"{resource} device {device_id} {health}"
        await self._guard(self.kubelet.wait_for(ready, timeout, what=what))
        return self.kubelet.resources[resource]

    async def wait_for_removed(
        self, resource: str, device_id: str, *, timeout: float = 5.0
    ) -> ResourceView:
        """Wait until the kubelet's list of ``resource`` no longer has ``device_id`` (the
        backend stopped publishing it: unplugged, not merely Unhealthy)."""

        def removed(k: Kubelet) -> bool:
            view = k.resources.get(resource)
            return view is not None and view.connected and device_id not in view.devices

        what = f"{resource} device {device_id} removed"
        await self._guard(self.kubelet.wait_for(removed, timeout, what=what))
        return self.kubelet.resources[resource]

    async def wait_for_gone(self, resource: str, *, timeout: float = 5.0) -> None:
        """Wait until ``resource`` is no longer served (its ListAndWatch stream ended)."""

        def gone(k: Kubelet) -> bool:
            view = k.resources.get(resource)
            return view is None or not view.connected

        await self._guard(self.kubelet.wait_for(gone, timeout, what=f"{resource} gone"))

    # -- metrics -------------------------------------------------------------------------

    async def scrape(self) -> Scrape:
        """``GET /metrics`` over HTTP from a metrics server on a loopback port, started at
        the first call: the series read at scrape time, those of every plugin (devices and
        their health, registrations) and the backend's own (``MetricsProvider``).

        The framework's event counters (allocations, RPC times) are not in it: the
        manager here reports to a no-op recorder. An HTTP status other than 200 raises
        AssertionError with the body.
        """
        if self._metrics is None:
            from prometheus_client import CollectorRegistry

            from accel_plugins.metrics.collectors import NoAttribution
            from accel_plugins.metrics.server import MetricsServer
            from accel_plugins.metrics.wiring import watch_manager

            registry = CollectorRegistry(auto_describe=False)
            watch_manager(registry, self.manager, NoAttribution())
            server = MetricsServer(registry, self.manager.problems)
            host, port = await server.start("127.0.0.1", 0)
            self._metrics = (server, host, port)
        _, host, port = self._metrics
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            await writer.drain()
            response = await reader.read()  # the server closes after one response
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        head, _, body = response.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1:2]
        if status != [b"200"]:
            raise AssertionError(f"GET /metrics: {head.decode(errors='replace')}: {body!r}")
        return Scrape(body.decode())

    # -- allocation ----------------------------------------------------------------------

    async def allocate(
        self,
        resource: str,
        count: int | None = None,
        *,
        ids: Sequence[str] = (),
        pod: str | None = None,
        container: str = "main",
        namespace: str = "default",
    ) -> AllocationRecord:
        """Allocate ``count`` devices (and/or exactly ``ids``) to a container, as the
        kubelet does at container creation; return the record.

        ``record.device_ids`` are the devices chosen and ``record.response`` is what
        the container gets (device nodes, mounts, env, annotations, CDI names).
        ``ids`` are must-include devices (``count`` defaults to their number):
        the framework's GetPreferredAllocation is asked for the rest, when any.
        Each call without ``pod`` is a new pod. A refusal raises the emulator's
        KubeletError (a ``PluginCallError`` with the gRPC code for the plugin's).
        """
        if count is None:
            count = len(ids) or 1
        if pod is None:
            pod = f"pod-{next(self._pods)}"
        return await self._guard(
            self.kubelet.allocate(
                pod, container, resource, count, namespace=namespace, must_include=ids
            )
        )

    def release(self, pod: str, *, namespace: str = "default") -> None:
        """The pod was deleted: its devices are free again."""
        self.kubelet.release(pod, namespace=namespace)

    # -- lifecycle -----------------------------------------------------------------------

    async def _guard(self, waiter: Awaitable[_T]) -> _T:
        """Await ``waiter``, but raise at once when the manager stops under it."""
        wait = asyncio.ensure_future(waiter)
        await asyncio.wait({wait, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if wait.done():
            return wait.result()
        wait.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await wait
        self._raise_crash()
        raise AssertionError("the manager stopped while the test was waiting")

    def _raise_crash(self) -> None:
        if self._crash_raised or not self.task.done() or self.task.cancelled():
            return
        error = self.task.exception()
        if error is not None:
            self._crash_raised = True
            raise error

    async def stop(self) -> None:
        """Stop the manager (sockets removed) and check how it ran.

        Raises the manager's exception when ``run()`` crashed, and an
        AssertionError when the backend crashed and ``expect_crashes`` is off.
        Safe to call again.
        """
        if self._stopped:
            return
        self._stopped = True
        if self._metrics is not None:
            await self._metrics[0].stop()
        try:
            if not self.task.done():
                await asyncio.sleep(0)  # let run() begin, or stop() finds nothing to stop
                await self.manager.stop()
                # run() returns at once after stop(); one that hangs is cancelled.
                await asyncio.wait({self.task}, timeout=10)
                if not self.task.done():
                    self.task.cancel()
                    await asyncio.wait({self.task})
                    raise AssertionError("the manager did not stop within 10 s of stop()")
            self._raise_crash()
        finally:
            for logger in FRAMEWORK_LOGGERS:
                logging.getLogger(logger).removeHandler(self._errors)
        if self.backend_restarts and not self.expect_crashes:
            lines = "\n  ".join(self._errors.lines[-5:]) or "(nothing logged)"
            raise AssertionError(
                f"the backend crashed or returned {self.backend_restarts} time(s) and was "
                f"restarted (pass expect_crashes=True if the test wants that); errors:\n  {lines}"
            )
