"""The device-plugin mode's process: the manager served until a signal, metrics after it.

What ``accel-plugins <backend>`` runs in device-plugin mode (:class:`DevicePluginMode`,
the :class:`~accel_plugins.runtime.mode.Mode` the command line picks); grpc,
prometheus_client and the backend's vendor library load here, on the run path only:
the metrics port is bound first, but the metrics load once the kubelet has the devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel_plugins.errors import AccelPluginsError

if TYPE_CHECKING:
    from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
    from accel_plugins.metrics.server import MetricsServer
    from accel_plugins.plugin.backend import Backend
    from accel_plugins.plugin.command import BackendFactory
    from accel_plugins.runtime.cordon import Cordons
    from accel_plugins.runtime.podresources import PodResourcesCache
    from accel_plugins.runtime.recorder import DeferredMetrics
    from accel_plugins.switch.wait import Handover

log = logging.getLogger("accel_plugins")


@dataclass(frozen=True)
class DevicePluginMode:
    """The device-plugin mode with everything it needs but the backend."""

    settings: ManagerSettings
    metrics_address: tuple[str, int] | None = None
    pod_resources: PodResourcesCache | None = None
    config_files: Sequence[Path] = ()
    node_name: str = ""
    kubeconfig: str | None = None
    cordons: Cordons | None = None
    handover: Handover | None = None

    async def serve(self, factory: BackendFactory) -> int:
        return await serve(
            factory,
            self.settings,
            self.metrics_address,
            self.pod_resources,
            self.config_files,
            self.node_name,
            self.kubeconfig,
            self.cordons,
            self.handover,
        )


async def serve(
    factory: Callable[[], Backend],
    settings: ManagerSettings,
    metrics_address: tuple[str, int] | None = None,
    pod_resources: PodResourcesCache | None = None,
    config_files: Sequence[Path] = (),
    node_name: str = "",
    kubeconfig: str | None = None,
    cordons: Cordons | None = None,
    handover: Handover | None = None,
) -> int:
    """Run the manager until SIGTERM/SIGINT (exit 0); SIGHUP reloads the configuration.

    With ``handover`` (the per-node switch), nothing is served until the DRA mode holds
    and advertises none of our devices on this node; SIGTERM ends that wait too.

    So does a change of any of ``config_files`` (watched with inotify): a
    ConfigMap update reaches the backend without a restart.

    Metrics go into a registry of this call's own; ``pod_resources`` names the
    pods holding each device on the device and GPU series. The metrics port is
    bound first (a taken port fails before the kubelet hears of us), but
    prometheus_client and the collectors load only once the kubelet has every
    resource's devices, or after METRICS_AFTER at most: registration does not
    wait for them (issue 17), and the events before are replayed. This is what
    ``accel-plugins <backend>`` runs after ``build``; a backend of your own
    becomes a command through an entry point (see :mod:`accel_plugins.cli.main`), not
    by calling this.
    """
    from accel_plugins.deviceplugin.manager import Manager
    from accel_plugins.runtime.config_watch import watch_configs
    from accel_plugins.runtime.recorder import DeferredMetrics

    listener = _metrics_listener(metrics_address) if metrics_address is not None else None
    recorder = DeferredMetrics()
    manager = Manager(factory, settings, metrics=recorder, cordons=cordons)
    if pod_resources is not None:
        pod_resources.touch()  # the first scrape then has pods to name
    loop = asyncio.get_running_loop()
    stopping: set[asyncio.Task[None]] = set()

    waiting: asyncio.Future[Any] | None = None

    def stop() -> None:
        log.info("stopping")
        if waiting is not None:
            waiting.cancel()
        stopping.add(asyncio.ensure_future(manager.stop()))

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGHUP, manager.reload)
    config_watch = watch_configs(config_files, lambda _path: manager.reload())
    if handover is not None:
        from accel_plugins.switch.wait import await_handover

        task = asyncio.ensure_future(await_handover(handover.side, handover.state))
        meanwhile = await _serve_while_waiting(listener, handover) if listener else None

        waiting = task
        try:
            await task
        except asyncio.CancelledError:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            if config_watch is not None:
                config_watch.close()
            if meanwhile is not None:
                await meanwhile.stop()
            if listener is not None:
                listener.close()
            return 0
        finally:
            if meanwhile is not None and not meanwhile.stopped:
                await meanwhile.stop()
        waiting = None
    # Modules, protobuf descriptors and gRPC state live as long as the process:
    # moved out of the collector's reach, full collections stay short. Done once
    # the plugin is up, without a collection first (one costs about 9 ms of CPU
    # and start-up leaves almost no cyclic garbage); the console script keeps the
    # collector off until then (accel_plugins.launch).
    freezing = loop.call_later(FREEZE_HEAP_AFTER, _freeze_heap)
    running = asyncio.ensure_future(manager.run())
    metrics = None
    extras = contextlib.AsyncExitStack()
    try:
        await _until_listed(manager, recorder, running, METRICS_AFTER)
        if not running.done():
            # The kubelet may call at once: what loads late loads in threads, not on the
            # loop, and hands the interpreter back to the loop often meanwhile.
            switch = sys.getswitchinterval()
            sys.setswitchinterval(WARM_SWITCH_INTERVAL)
            try:
                warming = asyncio.ensure_future(warm_backend(manager.backend))
                await asyncio.to_thread(importlib.import_module, "accel_plugins.metrics.wiring")
                await warming
            finally:
                sys.setswitchinterval(switch)
            from accel_plugins.metrics import metrics_server

            extra = []
            if handover is not None:
                from accel_plugins.switch.metrics import HandoverCollector

                extra.append(HandoverCollector(handover.state))
            metrics = metrics_server(manager, recorder, pod_resources, node_name, extra)
            if listener is not None:
                await metrics.start(sock=listener)
            if node_name:
                await _follow_node(extras, manager, node_name, kubeconfig, cordons)
            else:  # the API-server modules stay unloaded (issue 34)
                log.info("no Node Events and no cordon annotation watch: --node-name is not set")
        await running
    finally:
        await extras.aclose()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        if config_watch is not None:
            config_watch.close()
        freezing.cancel()
        if not running.done():  # cancelled from outside
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        if metrics is not None:
            await metrics.stop()
        if listener is not None:
            listener.close()
    return 0


async def _follow_node(
    extras: contextlib.AsyncExitStack,
    manager: Manager,
    node_name: str,
    kubeconfig: str | None,
    cordons: Cordons | None,
) -> None:
    """Node Events for health changes and the operator's cordon annotation, while
    ``extras`` lasts. After the kubelet has the devices, like metrics (issue 17); the
    watch replays devices already Unhealthy to the Events it starts."""
    from accel_plugins.kube.events import node_events

    await extras.enter_async_context(node_events(manager.health, node_name, kubeconfig=kubeconfig))
    if cordons is not None:
        from accel_plugins.kube.cordon import node_cordons

        await extras.enter_async_context(node_cordons(cordons, node_name, kubeconfig=kubeconfig))


METRICS_AFTER = 1.0  # seconds: metrics start by then even while no kubelet answers
WARM_SWITCH_INTERVAL = 0.0005  # seconds: a gRPC call waits at most this for the interpreter


async def warm_backend(backend: object) -> None:
    """Let a :class:`~accel_plugins.plugin.backend.Warmer` and a
    :class:`~accel_plugins.plugin.backend.PreferenceWarmer` load ahead, in a worker thread."""
    from accel_plugins.plugin.backend import PreferenceWarmer, Warmer

    def warm() -> None:
        if isinstance(backend, Warmer):
            backend.warm()
        if isinstance(backend, PreferenceWarmer):
            backend.warm_preferences()

    try:
        await asyncio.to_thread(warm)
    except Exception:
        log.exception("warming the backend up failed; its first calls load what they need")


async def _serve_while_waiting(listener: socket.socket, handover: Handover) -> MetricsServer:
    """/healthz, /readyz and the handover's series while the other mode holds the node.

    The plugin is alive (/healthz 200, noting the wait) and not ready (/readyz 503, saying
    what it waits for): a liveness probe must not restart it for a drain that outlasts
    its failure window. Served on a duplicate of the listener, so stopping it leaves the
    listener (and connections queued on it) to the metrics server that follows.
    """
    from prometheus_client import CollectorRegistry

    from accel_plugins.metrics.server import MetricsServer
    from accel_plugins.switch.metrics import HandoverCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(HandoverCollector(handover.state))

    async def alive() -> list[str]:
        return []

    async def unready() -> list[str]:
        return [handover.state.waiting_line()]

    server = MetricsServer(
        registry, alive, readiness=unready, notes=lambda: [handover.state.waiting_line()]
    )
    await server.start(sock=listener.dup())
    return server


def _metrics_listener(address: tuple[str, int]) -> socket.socket:
    """The metrics port, bound and listening now; AccelPluginsError when it cannot be."""
    host, port = address
    # No getaddrinfo: it loads the IDNA codec (stringprep and all) for any host name.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.create_server((host, port), family=family, backlog=100)
    except OSError as exc:
        raise AccelPluginsError(f"cannot serve metrics on {address}: {exc}") from exc
    listener.setblocking(False)
    return listener


async def _until_listed(
    manager: Manager, recorder: DeferredMetrics, running: asyncio.Future[None], limit: float
) -> None:
    """Wait until the kubelet has opened ListAndWatch for every resource served, at most
    ``limit`` seconds, or until the manager stops."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not running.done():
        served = [s.resource for s in manager.status().values() if s.serving]
        if served and recorder.streamed.issuperset(served):
            return
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        recorder.changed.clear()
        changed: asyncio.Future[Any] = asyncio.ensure_future(recorder.changed.wait())
        waiting: set[asyncio.Future[Any]] = {running, changed}
        await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        changed.cancel()


FREEZE_HEAP_AFTER = 2.0  # seconds after start; registration takes milliseconds


def _freeze_heap() -> None:
    gc.freeze()
    gc.enable()
    # The dataclass methods compiled while starting, for the next start (launch installs it).
    from accel_plugins.util import codecache

    codecache.save()
