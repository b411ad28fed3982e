"""Prometheus metrics and the health endpoint of a plugin process.

- ``recorder``: counters and histograms the framework feeds as things happen
  (allocations, RPC durations, registrations, restarts).
- ``collectors``: series read at scrape time (devices, registration, streams,
  per-device health with pod attribution, the backend's own series).
- ``exposition``: the text format; ``server``: /metrics and /healthz.

Everything goes into a registry the caller passes in, never the global one.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from accel_plugins.metrics.server import HealthCheck, MetricsServer, status_health
from accel_plugins.plugin.device import DeviceTree
from accel_plugins.plugin.lifecycle import PluginStatus

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
    "StatusSource",
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


def new_registry(status: StatusSource) -> CollectorRegistry:
    """A registry with the per-resource series of ``status`` (and build info) only."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PluginCollector(status))
    return registry


def watch_manager(
    registry: CollectorRegistry, manager: ManagerView, attribution: Attribution | None = None
) -> None:
    """Register every scrape-time collector of ``manager`` in ``registry``."""
    pods: Attribution = attribution if attribution is not None else NoAttribution()
    registry.register(PluginCollector(manager.status))
    registry.register(DeviceCollector(lambda: manager.tree, pods))
    registry.register(BackendCollector(lambda: manager.backend, pods))
