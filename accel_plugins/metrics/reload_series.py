"""Series of configuration reloads, read at scrape time from the manager's ReloadStatus.

Named as Prometheus names its own (``prometheus_config_last_reload_successful``),
so an alert written for one reads the same for the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accel_plugins.metrics.collectors import PREFIX
from accel_plugins.runtime.reload_status import ReloadStatus

ReloadSource = Callable[[], ReloadStatus]


class ReloadCollector(Collector):
    """``accel_plugins_config_reloads_total{result}`` and the last reload's outcome."""

    def __init__(self, status: ReloadSource) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        reloads = CounterMetricFamily(
            f"{PREFIX}_config_reloads",
            "Configuration reloads (file change or SIGHUP), by result; a failure keeps the "
            "previous configuration serving.",
            labels=["result"],
        )
        reloads.add_metric(["success"], status.successes)
        reloads.add_metric(["failure"], status.failures)
        successful = GaugeMetricFamily(
            f"{PREFIX}_config_last_reload_successful",
            "0 while the configuration on disk failed to load and the previous one serves.",
        )
        successful.add_metric([], 0 if status.failing else 1)
        when = GaugeMetricFamily(
            f"{PREFIX}_config_last_reload_success_timestamp_seconds",
            "When the configuration being served was loaded (start or reload), Unix time.",
        )
        when.add_metric([], status.last_success)
        yield from (reloads, successful, when)
