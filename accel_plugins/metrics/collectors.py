"""Series read at scrape time from the manager, the backend and the pod attribution.

Collectors run in a worker thread (see ``server.py``). They read only values
the event loop replaces whole (status snapshots, device trees, the
attribution cache), never structures it mutates in place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from accel_plugins import __version__
from accel_plugins.metrics.exposition import TextFamily, escape
from accel_plugins.plugin.backend import MetricsProvider, PodRef
from accel_plugins.plugin.device import Device, DeviceTree
from accel_plugins.plugin.health_reason import ReasonKind
from accel_plugins.runtime.recorder import PluginStatus

log = logging.getLogger(__name__)

PREFIX = "accel_plugins"
POD_LABELS = ("namespace", "pod", "container")

StatusSource = Callable[[], Mapping[str, PluginStatus]]
TreeSource = Callable[[], DeviceTree]
BackendSource = Callable[[], object]

_NOBODY: tuple[PodRef, ...] = ()
_UNATTRIBUTED = ("", "", "")


class Attribution(Protocol):
    """Which containers hold which devices (``PodResourcesCache`` is one)."""

    @property
    def available(self) -> bool:
        """True while the kubelet's PodResources API answered the last refresh."""
        ...

    def holders(self, resource: str, device_id: str) -> Sequence[PodRef]: ...

    def holders_of(self, resource: str) -> Mapping[str, Sequence[PodRef]]: ...


class NoAttribution:
    """Attribution switched off: every device is unattributed."""

    available = False

    def holders(self, resource: str, device_id: str) -> Sequence[PodRef]:
        return _NOBODY

    def holders_of(self, resource: str) -> Mapping[str, Sequence[PodRef]]:
        return {}


def pod_labels(refs: Sequence[PodRef]) -> list[tuple[str, str, str]]:
    """One label triple per holder; one empty triple for a device nobody holds."""
    if not refs:
        return [_UNATTRIBUTED]
    return [(r.namespace, r.pod, r.container) for r in refs]


class PluginCollector(Collector):
    """Per-resource state of the framework, plus build information.

    ``node_name`` (--node-name) labels the build info series: a scrape without
    Kubernetes service discovery still says which node answered. The label is
    ``node_name``, not ``node``, because the chart's ServiceMonitor puts the
    pod's node in a target label ``node`` (a sample's own label of that name
    would be renamed ``exported_node``).
    """

    def __init__(self, status: StatusSource, node_name: str = "") -> None:
        self._status = status
        self._node_name = node_name

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        devices = GaugeMetricFamily(
            f"{PREFIX}_devices",
            "Devices offered to the kubelet, by health.",
            labels=["resource", "health"],
        )
        registered = GaugeMetricFamily(
            f"{PREFIX}_resource_registered",
            "1 while the resource is registered with the kubelet and served.",
            labels=["resource"],
        )
        streams = GaugeMetricFamily(
            f"{PREFIX}_list_and_watch_streams",
            "Open ListAndWatch streams.",
            labels=["resource"],
        )
        for resource, s in status.items():
            devices.add_metric([resource, "Healthy"], s.healthy)
            devices.add_metric([resource, "Unhealthy"], s.devices - s.healthy)
            registered.add_metric([resource], 1 if s.registered and s.serving else 0)
            streams.add_metric([resource], s.open_streams)
        info = GaugeMetricFamily(
            f"{PREFIX}_build_info",
            "Always 1; the version and the node's name (--node-name) as labels.",
            labels=["version", "node_name"],
        )
        info.add_metric([__version__, self._node_name], 1)
        yield from (devices, registered, streams, info)


class DeviceCollector(Collector):
    """One series per device (and holder): its health and the pod holding it.

    A large node's scrape is mostly these series, and they change only when
    the backend publishes or the pods change. Their text is therefore kept per
    resource and written again only when the resource's device map or holder
    map is a different object (both are replaced whole, never changed).
    """

    NAME = f"{PREFIX}_device_healthy"
    HELP = (
        "1 while the device is Healthy, 0 while Unhealthy; namespace, pod and container "
        "name who holds it (empty when nobody does or attribution is unavailable)."
    )

    def __init__(self, tree: TreeSource, attribution: Attribution) -> None:
        self._tree = tree
        self._attribution = attribution
        self._cache: dict[str, tuple[Mapping[str, Device], Mapping[str, Sequence[PodRef]], str]]
        self._cache = {}

    def collect(self) -> Iterator[Metric]:
        tree = self._tree()
        cache = self._cache
        fresh = {}
        for resource, devices in tree.items():
            held = self._attribution.holders_of(resource)
            entry = cache.get(resource)
            if entry is None or entry[0] is not devices or entry[1] is not held:
                entry = (devices, held, _device_lines(self.NAME, resource, devices, held))
            fresh[resource] = entry
        self._cache = fresh  # resources that left are forgotten
        yield TextFamily(
            self.NAME,
            self.HELP,
            "gauge",
            "".join(entry[2] for entry in fresh.values()),
            lambda: _device_samples(self.NAME, fresh),
        )
        available = GaugeMetricFamily(
            f"{PREFIX}_pod_attribution_available",
            "1 while the kubelet's PodResources API answers, so device series name their pods.",
        )
        available.add_metric([], 1 if self._attribution.available else 0)
        yield available


def _device_rows(
    resource: str, devices: Mapping[str, Device], held: Mapping[str, Sequence[PodRef]]
) -> Iterator[tuple[dict[str, str], float]]:
    for device_id, device in devices.items():
        value = 1.0 if device.healthy else 0.0
        for namespace, pod, container in pod_labels(held.get(device_id, _NOBODY)):
            labels = {
                "resource": resource,
                "device": device_id,
                "namespace": namespace,
                "pod": pod,
                "container": container,
            }
            yield labels, value


def _device_lines(
    name: str, resource: str, devices: Mapping[str, Device], held: Mapping[str, Sequence[PodRef]]
) -> str:
    # Written straight from strings (labels in sorted order, as label_text sorts them):
    # no dict or Sample per device, which would keep the garbage collector busy.
    tail = f'",resource="{escape(resource)}"}} '
    out: list[str] = []
    for device_id, device in devices.items():
        value = "1.0" if device.healthy else "0.0"
        head = f'{name}{{container="'
        refs = held.get(device_id)
        if not refs:
            out.append(f'{head}",device="{escape(device_id)}",namespace="",pod="{tail}{value}\n')
            continue
        for ref in refs:
            out.append(
                f'{head}{escape(ref.container)}",device="{escape(device_id)}",'
                f'namespace="{escape(ref.namespace)}",pod="{escape(ref.pod)}{tail}{value}\n'
            )
    return "".join(out)


def _device_samples(
    name: str,
    entries: Mapping[str, tuple[Mapping[str, Device], Mapping[str, Sequence[PodRef]], str]],
) -> list[Sample]:
    return [
        Sample(name, labels, value)
        for resource, (devices, held, _) in entries.items()
        for labels, value in _device_rows(resource, devices, held)
    ]


class HealthReasonCollector(Collector):
    """One series per Unhealthy device saying why; a device that recovers has none.

    ``kind`` is the reason's kind (plugin/health_reason.py), ``code`` its number
    (the XID) or empty. An Unhealthy device whose backend gives no reason is
    ``kind="other"`` with an empty code, so every Unhealthy device has a series.
    """

    NAME = f"{PREFIX}_device_health_reason"
    HELP = (
        "1 for each Unhealthy device, labelled with why: kind (xid, ecc, gpu-lost, "
        "node-vanished, unreadable, unmonitored, cordoned, other) and code (the XID number)."
    )

    def __init__(self, tree: TreeSource) -> None:
        self._tree = tree

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            self.NAME, self.HELP, labels=["resource", "device", "kind", "code"]
        )
        for resource, devices in self._tree().items():
            for device_id, device in devices.items():
                if device.healthy:
                    continue
                reason = device.reason
                kind = reason.kind.value if reason is not None else ReasonKind.OTHER.value
                code = "" if reason is None or reason.code is None else str(reason.code)
                family.add_metric([resource, device_id, kind, code], 1)
        yield family


class BackendCollector(Collector):
    """Whatever the running backend contributes (a ``MetricsProvider``), e.g. GPU telemetry."""

    def __init__(self, backend: BackendSource, attribution: Attribution) -> None:
        self._backend = backend
        self._attribution = attribution

    def collect(self) -> Iterator[Metric]:
        backend = self._backend()
        if not isinstance(backend, MetricsProvider):
            return
        try:
            yield from list(backend.collect_metrics(self._attribution.holders))
        except Exception:
            # A backend bug must not take the framework's series down with it.
            log.exception("backend metrics failed; scraping without them")
