"""Prometheus metrics and the health endpoint of a plugin process, in both modes.

- ``plugin_metrics``: counters and histograms the framework feeds as things happen
  (allocations, RPC durations, registrations, restarts).
- ``collectors``: series read at scrape time (devices, registration, streams,
  per-device health with pod attribution, the backend's own series).
- ``exposition``: the text format; ``server``: /metrics and /healthz;
  ``wiring``: all of it for one device-plugin manager (read through a Protocol).

Everything goes into a registry the caller passes in, never the global one.
The names below load on first use: ``accel_plugins.metrics.address`` (the
flag's parser) must not bring prometheus_client onto a plugin's way to
registration (issue 17).

May import: :mod:`accel_plugins.runtime`, :mod:`accel_plugins.plugin`,
:mod:`accel_plugins.util` and ``errors``. Never a mode or a backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_plugins.util.lazyattrs import lazy_getattr

if TYPE_CHECKING:
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
        HealthReasonCollector,
        NoAttribution,
        PluginCollector,
        StatusSource,
    )
    from accel_plugins.metrics.exposition import CONTENT_TYPE, render
    from accel_plugins.metrics.plugin_metrics import PrometheusMetrics
    from accel_plugins.metrics.reload_series import ReloadCollector
    from accel_plugins.metrics.server import HealthCheck, MetricsServer, status_health
    from accel_plugins.metrics.wiring import (
        ManagerView,
        metrics_server,
        new_registry,
        watch_manager,
    )

_WHERE = {
    "DEFAULT_METRICS_ADDRESS": "address",
    "DEFAULT_METRICS_PORT": "address",
    "parse_address": "address",
    "PREFIX": "collectors",
    "Attribution": "collectors",
    "BackendCollector": "collectors",
    "DeviceCollector": "collectors",
    "HealthReasonCollector": "collectors",
    "NoAttribution": "collectors",
    "PluginCollector": "collectors",
    "StatusSource": "collectors",
    "CONTENT_TYPE": "exposition",
    "render": "exposition",
    "PrometheusMetrics": "plugin_metrics",
    "ReloadCollector": "reload_series",
    "HealthCheck": "server",
    "MetricsServer": "server",
    "status_health": "server",
    "ManagerView": "wiring",
    "metrics_server": "wiring",
    "new_registry": "wiring",
    "watch_manager": "wiring",
}

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_METRICS_ADDRESS",
    "DEFAULT_METRICS_PORT",
    "PREFIX",
    "Attribution",
    "BackendCollector",
    "DeviceCollector",
    "HealthCheck",
    "HealthReasonCollector",
    "ManagerView",
    "MetricsServer",
    "NoAttribution",
    "PluginCollector",
    "PrometheusMetrics",
    "ReloadCollector",
    "StatusSource",
    "metrics_server",
    "new_registry",
    "parse_address",
    "render",
    "status_health",
    "watch_manager",
]


__getattr__ = lazy_getattr(globals(), {name: f".{module}" for name, module in _WHERE.items()})


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
