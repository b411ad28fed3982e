"""The metrics reference page: every family a plugin process can expose, from the code.

Each source the process registers (the framework's recorder, the scrape-time
collectors, the NVIDIA backend's GPU telemetry, the DRA slice publisher and
Prepare/Unprepare series) is built on its own registry and fed one sample, so a
family's labels show; the page lists name, type, labels and help text as a
scrape would say them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

RESOURCE = "example.com/dev"


def _framework() -> CollectorRegistry:
    from accel_plugins.metrics.collectors import DeviceCollector, NoAttribution, PluginCollector
    from accel_plugins.metrics.plugin_metrics import PrometheusMetrics
    from accel_plugins.metrics.reload_series import ReloadCollector
    from accel_plugins.plugin.device import Device
    from accel_plugins.runtime.recorder import AllocationFailure, PluginStatus, RestartReason
    from accel_plugins.runtime.reload_status import ReloadStatus

    registry = CollectorRegistry(auto_describe=False)
    recorder = PrometheusMetrics(registry)
    recorder.rpc_finished("Allocate", RESOURCE, 0.001)
    recorder.allocated(RESOURCE, 1)
    recorder.allocation_failed(RESOURCE, next(iter(AllocationFailure)))
    recorder.registered(RESOURCE)
    recorder.registration_failed(RESOURCE)
    recorder.stream_opened(RESOURCE)
    recorder.kubelet_restarted()
    recorder.server_restarted(RESOURCE, next(iter(RestartReason)))
    recorder.backend_restarted()
    status = PluginStatus(
        resource=RESOURCE,
        serving=True,
        registered=True,
        devices=1,
        healthy=1,
        open_streams=1,
        registrations=1,
    )
    registry.register(PluginCollector(lambda: {RESOURCE: status}, "node-0"))
    tree = {RESOURCE: {"d0": Device(id="d0")}}
    registry.register(DeviceCollector(lambda: tree, NoAttribution()))
    registry.register(ReloadCollector(lambda: ReloadStatus(successes=1)))
    return registry


def _gpu_telemetry() -> list[Metric]:
    from accel_plugins.backends.nvidia.telemetry import families

    return families([], [], unhealthy=set(), holders={}, xids={}, errors={})


def _dra() -> CollectorRegistry:
    from accel_plugins.dra.kube.publisher import KubeSlicePublisher
    from accel_plugins.dra.request_metrics import RequestMetrics

    registry = CollectorRegistry(auto_describe=False)
    # The client is only kept by the constructor; nothing is published here.
    KubeSlicePublisher(cast(Any, None), driver="d.example.com", node="n", registry=registry)
    RequestMetrics("d.example.com", registry)  # its series exist from the start
    return registry


def _labels(metric: Metric) -> list[str]:
    names: list[str] = list(getattr(metric, "_labelnames", ()))
    for sample in metric.samples:
        names += [name for name in sample.labels if name not in names and name != "le"]
    return names


def _name(metric: Metric) -> str:
    return metric.name + ("_total" if metric.type == "counter" else "")


def _rows(metrics: Iterable[Metric]) -> list[str]:
    lines = ["| metric | type | labels | help |", "| --- | --- | --- | --- |"]
    for metric in sorted(metrics, key=_name):
        labels = ", ".join(f"`{label}`" for label in _labels(metric))
        text = metric.documentation.replace("|", "\\|")
        lines.append(f"| `{_name(metric)}` | {metric.type} | {labels} | {text} |")
    return [*lines, ""]


def page(note: str) -> str:
    lines = [
        note,
        "",
        "# Metrics",
        "",
        "Every metric family a plugin process can serve on `/metrics`, with the help text a",
        "scrape shows. How they are made, attribution and cost:",
        "[Metrics and /healthz](../metrics.md).",
        "",
        "## Every plugin",
        "",
        *_rows(_framework().collect()),
        "## NVIDIA GPU telemetry (`accel-plugins nvidia`)",
        "",
        *_rows(_gpu_telemetry()),
        "## DRA (`--kubelet-api dra`)",
        "",
        *_rows(_dra().collect()),
    ]
    return "\n".join(lines).rstrip() + "\n"
