"""Prometheus metrics and the health endpoint of a plugin process.

- ``recorder``: counters and histograms the framework feeds as things happen
  (allocations, RPC durations, registrations, restarts).
- ``collectors``: series read at scrape time (devices, registration, streams,
  per-device health with pod attribution, the backend's own series).
- ``exposition``: the text format; ``server``: /metrics and /healthz.

Everything goes into a registry the caller passes in, never the global one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry

from accel_plugins.metrics.address import (
    DEFAULT_METRICS_ADDRESS,
    DEFAULT_METRICS_PORT,
    parse_address,
)
from accel_plugins.metrics.collectors import (
    PREFIX,
    Attribution,
    BackendCollector,
    DeviceCollector,
    NoAttribution,
    PluginCollector,
    StatusSource,
)
from accel_plugins.metrics.exposition import CONTENT_TYPE, render
from accel_plugins.metrics.recorder import PrometheusMetrics
from accel_plugins.metrics.reloads import ReloadCollector
from accel_plugins.metrics.server import HealthCheck, MetricsServer, status_health
from accel_plugins.plugin.backend import Backend
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.plugin.lifecycle import PluginStatus
from accel_plugins.plugin.manager import Manager, ManagerSettings
from accel_plugins.plugin.podresources import PodResourcesCache
from accel_plugins.plugin.reloads import ReloadStatus

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_METRICS_ADDRESS",
    "DEFAULT_METRICS_PORT",
    "PREFIX",
    "Attribution",
    "BackendCollector",
    "DeviceCollector",
    "HealthCheck",
    "ManagerView",
    "MetricsServer",
    "NoAttribution",
    "PluginCollector",
    "PrometheusMetrics",
    "ReloadCollector",
    "StatusSource",
    "instrumented_manager",
    "new_registry",
    "parse_address",
    "render",
    "status_health",
    "watch_manager",
]


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
    registry.register(BackendCollector(lambda: manager.backend, pods))
    registry.register(ReloadCollector(lambda: manager.reload_status))


def instrumented_manager(
    factory: Callable[[], Backend],
    settings: ManagerSettings,
    pod_resources: PodResourcesCache | None = None,
    node_name: str = "",
) -> tuple[Manager, MetricsServer]:
    """A manager whose events and state land in a registry of its own, and the server for it.

    This is a plugin process's whole metrics wiring: the recorder goes into the
    manager, the scrape-time collectors read it, and ``pod_resources`` (when
    given) names the pods on device and GPU series and is refreshed by scrapes;
    ``node_name`` labels the build info.
    """
    registry = CollectorRegistry(auto_describe=False)
    manager = Manager(factory, settings, metrics=PrometheusMetrics(registry))
    watch_manager(registry, manager, pod_resources, node_name)
    server = MetricsServer(
        registry,
        manager.problems,
        notes=lambda: [note] if (note := manager.reload_status.note()) else [],
        before_scrape=[pod_resources.touch] if pod_resources is not None else [],
    )
    return manager, server
