"""The Prometheus text format (0.0.4) of a registry, fast enough for 10,000 devices.

It writes what ``prometheus_client.generate_latest`` writes, minus the
``*_created`` series (the text format has no place for creation times, so
they would only be stored as extra gauges). It is ours because per-device
series dominate a large node's scrape: generate_latest re-escapes every label
name of every sample (10,000 samples with five labels take it about 50 ms on
a small machine), and building 10,000 Sample objects per scrape keeps the
garbage collector busy. A :class:`TextFamily` therefore carries its sample
lines already written (collectors cache them while their input is
unchanged) and builds Sample objects only for whoever asks for them. Metric
and label names are the project's own and always valid; values are escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# OpenMetrics-only samples: generate_latest moves these into gauges after the family.
_MOVED = ("_gsum", "_gcount")
_TYPES = {"counter": "counter", "info": "gauge", "stateset": "gauge", "unknown": "untyped"}


class TextFamily(Metric):
    """A family whose sample lines are already in the text format.

    ``lines`` is what :func:`render` writes after the HELP and TYPE lines;
    ``samples`` are built from ``build`` on first access, so other readers of
    the registry (tests, generate_latest) see the same series.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        typ: str,
        lines: str,
        build: Callable[[], list[Sample]],
    ) -> None:
        super().__init__(name, documentation, typ)
        self.lines = lines
        self._build: Callable[[], list[Sample]] | None = build

    @property
    def samples(self) -> list[Sample]:
        if self._build is not None:
            self._samples = self._build()
            self._build = None
        return self._samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._samples = value
        self._build = None


def escape(text: str) -> str:
    """A label value as the text format writes it between quotes."""
    return _value(text)


def _value(text: str) -> str:
    if "\\" in text or "\n" in text or '"' in text:
        return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return text


def _number(value: float) -> str:
    """Go's float formatting, as Prometheus writes numbers (``1.0``, ``+Inf``, ``1.5e+06``)."""
    d = float(value)
    if d != d:
        return "NaN"
    if d in (math.inf, -math.inf):
        return "+Inf" if d > 0 else "-Inf"
    text = repr(d)
    dot = text.find(".")
    # Go switches to an exponent sooner than Python does.
    if d > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


Entry = tuple[dict[str, str], float, object]


def _lines(name: str, entries: Iterable[Entry]) -> str:
    out: list[str] = []
    for labels, value, timestamp in entries:
        if labels:
            pairs = ",".join([f'{k}="{_value(labels[k])}"' for k in sorted(labels)])
            line = f"{name}{{{pairs}}} {_number(value)}"
        else:
            line = f"{name} {_number(value)}"
        if timestamp is not None:
            line += f" {int(float(timestamp) * 1000):d}"  # type: ignore[arg-type]
        out.append(line + "\n")
    return "".join(out)


def _family(metric: Metric) -> str:
    name = metric.name
    kind = metric.type
    if kind == "counter":
        name += "_total"
    elif kind == "info":
        name += "_info"
    elif kind == "gaugehistogram":
        kind = "histogram"
    text = _help(metric.documentation)
    parts = [f"# HELP {name} {text}\n# TYPE {name} {_TYPES.get(kind, kind)}\n"]
    if isinstance(metric, TextFamily):
        parts.append(metric.lines)
        return "".join(parts)
    created = metric.name + "_created"
    moved = {metric.name + suffix: suffix for suffix in _MOVED}
    later: dict[str, list[Entry]] = {}
    run: list[Entry] = []
    run_name = ""
    # Consecutive samples of one name (all of a gauge's) are formatted as one run.
    for sample in metric.samples:
        if sample.name == created:
            continue
        entry = (sample.labels, sample.value, sample.timestamp)
        if sample.name in moved:
            later.setdefault(sample.name, []).append(entry)
            continue
        if sample.name != run_name and run:
            parts.append(_lines(run_name, run))
            run = []
        run_name = sample.name
        run.append(entry)
    if run:
        parts.append(_lines(run_name, run))
    for moved_name in sorted(later, key=lambda n: moved[n]):
        parts.append(f"# HELP {moved_name} {text}\n# TYPE {moved_name} gauge\n")
        parts.append(_lines(moved_name, later[moved_name]))
    return "".join(parts)


def render(registry: Collector) -> bytes:
    """Every family the registry's collectors yield, in the text format."""
    return "".join(_family(m) for m in registry.collect()).encode("utf-8")
