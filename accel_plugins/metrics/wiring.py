"""A plugin process's metrics wiring: recorder, scrape-time collectors, the server."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
from accel_plugins.metrics.recorder import PrometheusMetrics
from accel_plugins.metrics.reloads import ReloadCollector
from accel_plugins.metrics.server import MetricsServer
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.plugin.lifecycle import PluginStatus
from accel_plugins.plugin.manager import Manager, ManagerSettings
from accel_plugins.plugin.podresources import PodResourcesCache
from accel_plugins.plugin.recorder import DeferredMetrics
from accel_plugins.plugin.reloads import ReloadStatus


class ManagerView(Protocol):
    """What the collectors read from a running :class:`~accel_plugins.plugin.manager.Manager`."""

    def status(self) -> Mapping[str, PluginStatus]: ...

    @property
    def tree(self) -> DeviceTree: ...

    @property
    def backend(self) -> object: ...

    @property
    def reload_status(self) -> ReloadStatus: ...


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
    manager: Manager,
    recorder: DeferredMetrics | None = None,
    pod_resources: PodResourcesCache | None = None,
    node_name: str = "",
    extra: Sequence[Collector] = (),
) -> MetricsServer:
    """The metrics of a running ``manager``, served by the returned (unstarted) server.

    ``recorder``, the manager's :class:`~accel_plugins.plugin.recorder.DeferredMetrics`,
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


def instrumented_manager(
    factory: Callable[[], Backend],
    settings: ManagerSettings,
    pod_resources: PodResourcesCache | None = None,
    node_name: str = "",
) -> tuple[Manager, MetricsServer]:
    """A manager whose events and state land in a registry of its own, and the server for it.

    Everything at once, for callers that start metrics before the manager (the
    demo, benchmarks); ``accel-plugins <backend>`` registers first and calls
    :func:`metrics_server` once the kubelet has the devices.
    """
    recorder = DeferredMetrics()
    manager = Manager(factory, settings, metrics=recorder)
    return manager, metrics_server(manager, recorder, pod_resources, node_name)
