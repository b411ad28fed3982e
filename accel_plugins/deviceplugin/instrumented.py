"""A device-plugin manager with its metrics wired from the start (the demo, benchmarks)."""

from __future__ import annotations

from collections.abc import Callable

from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.metrics.server import MetricsServer
from accel_plugins.metrics.wiring import metrics_server
from accel_plugins.plugin.backend import Backend
from accel_plugins.runtime.podresources import PodResourcesCache
from accel_plugins.runtime.recorder import DeferredMetrics


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
