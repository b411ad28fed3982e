"""A plugin process's metrics wiring: recorder, scrape-time collectors, the server.

It reads the device-plugin manager through :class:`ManagerView` only; the mode's own
``accel_plugins.deviceplugin.instrumented`` builds a manager with all of it at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from accel_plugins.metrics.collectors import (
    Attribution,
    BackendCollector,
    DeviceCollector,
    HealthReasonCollector,
    NoAttribution,
    PluginCollector,
    StatusSource,
)
from accel_plugins.metrics.plugin_metrics import PrometheusMetrics
from accel_plugins.metrics.reload_series import ReloadCollector
from accel_plugins.metrics.server import MetricsServer
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.runtime.podresources import PodResourcesCache
from accel_plugins.runtime.recorder import DeferredMetrics, PluginStatus
from accel_plugins.runtime.reload_status import ReloadStatus


class ManagerView(Protocol):
    """What the collectors read from a running device-plugin ``Manager``."""

    def status(self) -> Mapping[str, PluginStatus]: ...

    @property
    def tree(self) -> DeviceTree: ...

    @property
    def backend(self) -> object: ...

    @property
    def reload_status(self) -> ReloadStatus: ...


class ServedManager(ManagerView, Protocol):
    """A running manager whose metrics are served: /healthz asks it what is wrong."""

    async def problems(self, timeout: float = 1.0) -> list[str]: ...


def new_registry(status: StatusSource, node_name: str = "") -> CollectorRegistry:
    """A registry with the per-resource series of ``status`` (and build info) only."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PluginCollector(status, node_name))
    return registry


def watch_manager(
    registry: CollectorRegistry,
    manager: ManagerView,
    attribution: Attribution | None = None,
    node_name: str = "",
) -> None:
    """Register every scrape-time collector of ``manager`` in ``registry``."""
    pods: Attribution = attribution if attribution is not None else NoAttribution()
    registry.register(PluginCollector(manager.status, node_name))
    registry.register(DeviceCollector(lambda: manager.tree, pods))
    registry.register(HealthReasonCollector(lambda: manager.tree))
    registry.register(BackendCollector(lambda: manager.backend, pods))
    registry.register(ReloadCollector(lambda: manager.reload_status))


def metrics_server(
    manager: ServedManager,
    recorder: DeferredMetrics | None = None,
    pod_resources: PodResourcesCache | None = None,
    node_name: str = "",
    extra: Sequence[Collector] = (),
) -> MetricsServer:
    """The metrics of a running ``manager``, served by the returned (unstarted) server.

    ``recorder``, the manager's :class:`~accel_plugins.runtime.recorder.DeferredMetrics`,
    gets the Prometheus recorder and replays what it held; ``pod_resources``
    (when given) names the pods on device and GPU series and is refreshed by
    scrapes; ``node_name`` labels the build info; ``extra`` collectors join them.
    """
    registry = CollectorRegistry(auto_describe=False)
    if recorder is not None:
        recorder.attach(PrometheusMetrics(registry))
    watch_manager(registry, manager, pod_resources, node_name)
    for collector in extra:
        registry.register(collector)
    return MetricsServer(
        registry,
        manager.problems,
        notes=lambda: [note] if (note := manager.reload_status.note()) else [],
        before_scrape=[pod_resources.touch] if pod_resources is not None else [],
    )
