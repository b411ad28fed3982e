"""Our text exposition writes what prometheus_client's generate_latest writes, minus *_created."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    Summary,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)

from accel_plugins.metrics import render
from tests.support.metrics import promtool_check

_CREATED = re.compile(r"^(# (HELP|TYPE) )?[a-zA-Z_:][a-zA-Z0-9_:]*_created[ {]")


def without_created(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not _CREATED.match(line))


class Odd:
    """Families the client's metric classes never produce, with timestamps and odd values."""

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "odd_values", 'Help with a backslash \\ and a\nnewline and "quotes".', labels=["v"]
        )
        for label, value in [
            ("inf", math.inf),
            ("minus-inf", -math.inf),
            ("nan", math.nan),
            ("big", 12345678.0),
            ("tiny", 1e-9),
            ("negative", -2.5),
            ("int", 7),
        ]:
            gauge.add_metric([label], value)
        gauge.add_metric(["stamped"], 1, timestamp=1700000000.123)
        yield gauge
        histogram = GaugeHistogramMetricFamily(
            "odd_queue_seconds", "A gauge histogram.", labels=["q"]
        )
        histogram.add_metric(["a"], [("1.0", 2), ("+Inf", 3)], gsum_value=4.5)
        yield histogram
        untyped = UnknownMetricFamily("odd_untyped", "No type.")
        untyped.add_metric([], 3)
        yield untyped
        yield GaugeMetricFamily("odd_empty", "A family without samples.", labels=["x"])


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    counter = Counter("odd_events", "Events.", ["kind"], registry=registry)
    counter.labels('quote " backslash \\ newline \n').inc(3)
    counter.labels("plain").inc()
    Gauge("odd_level", "A plain gauge.", registry=registry).set(0.25)
    histogram = Histogram("odd_rpc_seconds", "RPCs.", ["method"], registry=registry)
    for seconds in (0.001, 0.2, 7.0):
        histogram.labels("Allocate").observe(seconds)
    Summary("odd_size_bytes", "Sizes.", registry=registry).observe(512)
    Info("odd_build", "Build.", registry=registry).info({"version": "1.2.3"})
    Enum("odd_state", "State.", states=["up", "down"], registry=registry).state("down")
    registry.register(Odd())
    return registry


def test_matches_generate_latest_without_created_series(registry: CollectorRegistry) -> None:
    ours = render(registry).decode()
    assert "_created" not in ours
    assert ours == without_created(generate_latest(registry).decode())


def test_promtool_accepts_it(registry: CollectorRegistry) -> None:
    promtool_check(render(registry).decode())
