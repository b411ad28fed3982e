"""``accel-plugins <backend> --kubelet-api dra``: the backend served as a DRA driver.

Imported only in DRA mode, as is the API side (``accel_plugins.dra.kube``,
lightkube, the ``[dra]`` extra): the device-plugin path never pays for either.
The API side is looked up by module name at run time, so a framework-only
install reports the missing extra instead of failing to import.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from prometheus_client import CollectorRegistry

from accel_plugins.dra.attribution import ClaimAttribution
from accel_plugins.dra.capabilities import NONE as NO_CAPABILITIES
from accel_plugins.dra.capabilities import RunningCapabilities
from accel_plugins.dra.driver import DraDriver, DraSettings
from accel_plugins.dra.request_metrics import RequestMetrics
from accel_plugins.errors import AccelPluginsError, ConfigError
from accel_plugins.kube.cordon import node_cordons
from accel_plugins.kube.events import node_events
from accel_plugins.metrics.collectors import (
    BackendCollector,
    DeviceCollector,
    HealthReasonCollector,
)
from accel_plugins.metrics.server import MetricsServer
from accel_plugins.plugin.command import BackendFactory
from accel_plugins.runtime.config_watch import watch_configs
from accel_plugins.runtime.cordon import Cordons
from accel_plugins.switch.metrics import HandoverCollector
from accel_plugins.switch.model import SwitchSettings
from accel_plugins.switch.wait import Handover, await_handover

log = logging.getLogger(__name__)

STATUS_FLUSH_TIMEOUT = 5.0  # seconds a stopping driver gives its queued claim status writes

API_SIDE = "accel_plugins.dra.kube"
EXTRA_HINT = "pip install 'accel-plugins[dra]'"


def api_side() -> ModuleType:
    """The API side's module; ConfigError naming the extra when its client is missing."""
    try:
        return importlib.import_module(API_SIDE)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            "--kubelet-api dra",
            "",
            f"needs the Kubernetes client ({exc.name} is not installed): {EXTRA_HINT}",
        ) from exc


@dataclass(frozen=True)
class DraMode:
    """The DRA mode with everything it needs but the backend (see :func:`serve_dra`)."""

    settings: DraSettings
    kubeconfig: str | None
    metrics_address: tuple[str, int] | None = None
    config_files: Sequence[Path] = ()
    device_taints: str = "auto"
    shared_devices: str = "auto"
    rolling_update: str = "auto"
    cordons: Cordons | None = None
    handover: Handover | None = None
    switch: SwitchSettings | None = None

    async def serve(self, factory: BackendFactory) -> int:
        return await serve_dra(
            factory,
            self.settings,
            self.kubeconfig,
            self.metrics_address,
            self.config_files,
            device_taints=self.device_taints,
            shared_devices=self.shared_devices,
            rolling_update=self.rolling_update,
            cordons=self.cordons,
            handover=self.handover,
            switch=self.switch,
        )


async def serve_dra(
    factory: BackendFactory,
    settings: DraSettings,
    kubeconfig: str | None,
    metrics_address: tuple[str, int] | None = None,
    config_files: Sequence[Path] = (),
    *,
    device_taints: str = "auto",
    shared_devices: str = "auto",
    rolling_update: str = "auto",
    cordons: Cordons | None = None,
    handover: Handover | None = None,
    switch: SwitchSettings | None = None,
) -> int:
    """Run the driver until SIGTERM/SIGINT (exit 0); SIGHUP, or a change of any of
    ``config_files``, rebuilds the backend (kept when the new one cannot be built).

    /metrics has the device and backend series of device-plugin mode (their
    ``resource`` label is the backend's resource name) and the API side's;
    /healthz is 503 while the driver's socket or registration is missing; while it
    waits for the handover, /healthz is 200 and /readyz 503, saying what it waits for.
    ``device_taints`` is ``--dra-device-taints`` (auto, on, off), ``shared_devices``
    ``--dra-shared-devices`` (the same), ``rolling_update`` ``--dra-rolling-update``
    (auto keeps the pod UID in ``settings`` only for kubelets 1.33+). With ``handover``
    the driver waits before serving until the device-plugin mode holds and advertises
    none of our devices; with ``switch``, a stop on a node relabelled away from DRA
    deletes the node's slices of this driver (an upgrade keeps them: the next driver
    adopts them).
    """
    kube = api_side()
    client = kube.make_client(kube.client.load_config(kubeconfig))
    settings = await kube.rolling_settings(client, settings, rolling_update)
    registry = CollectorRegistry(auto_describe=False)
    driver: DraDriver | None = None

    # The running backend's DRA capabilities, looked up once per backend by the driver
    # (it is rebuilt after a crash and on SIGHUP); the defaults between backends.
    running_backend = RunningCapabilities(
        lambda: driver.capabilities if driver is not None else NO_CAPABILITIES
    )
    # Asked once, by whichever side needs it first.
    apis = kube.ApiVersions(client, node=settings.node_name)

    slices = kube.KubeSlicePublisher(
        client,
        driver=settings.driver_name,
        node=settings.node_name,
        describe=running_backend.dra_device,
        namer=running_backend,
        registry=registry,
        taints=device_taints,
        keyer=running_backend,
        api=apis,
        counters=running_backend,
        sharer=running_backend,
        shares=shared_devices,
    )
    status = kube.KubeClaimStatus(
        client,
        apis,
        driver=settings.driver_name,
        node=settings.node_name,
        describe=running_backend.dra_device,
    )
    claims = kube.KubeClaimSource(client, apis, status)
    requests = RequestMetrics(settings.driver_name, registry)
    driver = DraDriver(factory, settings, claims, slices, cordons, requests)
    running = driver
    # Holders from the prepared claims' pods (the kubelet's PodResources API names DRA
    # devices only behind a feature gate).
    holders = ClaimAttribution(lambda: running.preparer.prepared, lambda: running.inventory)
    registry.register(DeviceCollector(lambda: running.tree, holders))
    registry.register(HealthReasonCollector(lambda: running.tree))
    registry.register(BackendCollector(lambda: running.backend, holders))
    if handover is not None:
        registry.register(HandoverCollector(handover.state))

    # While the other mode still holds the node the driver is alive (/healthz 200, noting
    # the wait) but not ready (/readyz 503): a liveness probe must not restart a plugin for
    # a drain that outlasts its failure window.
    waiting_for = [handover] if handover is not None else []

    async def problems() -> list[str]:
        return [] if waiting_for else running.problems()

    async def unready() -> list[str]:
        return [w.state.waiting_line() for w in waiting_for]

    metrics = MetricsServer(
        registry,
        problems,
        readiness=unready,
        notes=lambda: (
            [w.state.waiting_line() for w in waiting_for]
            + ([running.standby] if running.standby is not None else [])
        ),
    )
    if metrics_address is not None:
        try:
            await metrics.start(*metrics_address)
        except OSError as exc:
            await client.close()
            raise AccelPluginsError(f"cannot serve metrics on {metrics_address}: {exc}") from exc
    loop = asyncio.get_running_loop()

    waiting: asyncio.Future[Any] | None = None

    def stop() -> None:
        log.info("stopping")
        assert driver is not None
        if waiting is not None:
            waiting.cancel()
        driver.stop()

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGHUP, driver.reload)
    config_watch = watch_configs(config_files, lambda _path: running.reload())
    try:
        if handover is not None:
            task = asyncio.ensure_future(await_handover(handover.side, handover.state))
            waiting = task
            try:
                await task
            except asyncio.CancelledError:
                return 0  # SIGTERM while waiting: nothing was published
            waiting = None
            waiting_for.clear()
        if switch is not None:
            driver.before_unserve = lambda: kube.withdraw_on_switch(client, apis, settings, switch)
        async with (
            node_events(driver.health, settings.node_name, client=client),
            node_cordons(cordons, settings.node_name, client=client)
            if cordons is not None
            else contextlib.nullcontext(),
        ):
            await driver.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        if config_watch is not None:
            config_watch.close()
        await metrics.stop()
        # The claims' status entries still queued (an Unprepare just before the stop).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(status.idle(), STATUS_FLUSH_TIMEOUT)
        await status.close()
        await client.close()
    return 0
