"""The switch's wait on /metrics, read at scrape time (prometheus_client loads here only)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from accel_plugins.switch.wait import HandoverState


class HandoverCollector(Collector):
    """``accel_plugins_kubelet_api_switch_*``: what the plugin waits for before publishing."""

    def __init__(self, state: HandoverState) -> None:
        self.state = state

    def collect(self) -> Iterable[GaugeMetricFamily]:
        s = self.state
        waiting = GaugeMetricFamily(
            "accel_plugins_kubelet_api_switch_waiting",
            "1 while the plugin waits for the other kubelet API mode to release and stop "
            "advertising this node's devices before it publishes its own",
            labels=["mode"],
        )
        waiting.add_metric([s.mode], 1.0 if s.waiting else 0.0)
        held = GaugeMetricFamily(
            "accel_plugins_kubelet_api_switch_held_devices",
            "Devices the other mode still has allocated on this node (pods or prepared claims)",
            labels=["mode"],
        )
        held.add_metric([s.mode], float(len(s.blockers.held)))
        advertised = GaugeMetricFamily(
            "accel_plugins_kubelet_api_switch_advertised",
            "Endpoints of the other mode still advertising on this node (sockets)",
            labels=["mode"],
        )
        advertised.add_metric([s.mode], float(len(s.blockers.advertised)))
        waited = GaugeMetricFamily(
            "accel_plugins_kubelet_api_switch_wait_seconds",
            "How long the plugin waited for the other mode before publishing",
            labels=["mode"],
        )
        waited.add_metric([s.mode], s.waited)
        yield from (waiting, held, advertised, waited)
