"""Counters and histograms of what the framework did: the Prometheus ``PluginMetrics``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from accel_plugins.metrics.collectors import PREFIX
from accel_plugins.runtime.recorder import AllocationFailure, RestartReason

# Allocate answers in well under a millisecond; hooks that touch hardware take longer.
RPC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class PrometheusMetrics:
    """:class:`~accel_plugins.runtime.recorder.PluginMetrics` into ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._rpc_children: dict[tuple[str, str], Histogram] = {}
        self._allocation_children: dict[str, tuple[Counter, Counter]] = {}
        self._rpc = Histogram(
            f"{PREFIX}_rpc_duration_seconds",
            "Time to answer a unary DevicePlugin RPC (failed calls included).",
            ["method", "resource"],
            buckets=RPC_BUCKETS,
            registry=registry,
        )
        self._allocations = Counter(
            f"{PREFIX}_allocations",
            "Containers given devices by Allocate.",
            ["resource"],
            registry=registry,
        )
        self._allocated_devices = Counter(
            f"{PREFIX}_allocated_devices",
            "Devices handed out by Allocate, summed over containers.",
            ["resource"],
            registry=registry,
        )
        self._allocation_errors = Counter(
            f"{PREFIX}_allocation_errors",
            "Refused container allocations, by reason.",
            ["resource", "reason"],
            registry=registry,
        )
        self._registrations = Counter(
            f"{PREFIX}_registrations",
            "Registrations the kubelet accepted.",
            ["resource"],
            registry=registry,
        )
        self._streams_opened = Counter(
            f"{PREFIX}_listandwatch_streams",
            "ListAndWatch streams the kubelet opened (one per registration it accepted).",
            ["resource"],
            registry=registry,
        )
        self._registration_failures = Counter(
            f"{PREFIX}_registration_failures",
            "Register calls that failed (refused, or no kubelet); each is retried.",
            ["resource"],
            registry=registry,
        )
        self._kubelet_restarts = Counter(
            f"{PREFIX}_kubelet_restarts",
            "Kubelet restarts seen: its registration socket came back as a new file.",
            registry=registry,
        )
        self._server_restarts = Counter(
            f"{PREFIX}_server_restarts",
            "Times a resource's gRPC server was started afresh, by reason.",
            ["resource", "reason"],
            registry=registry,
        )
        self._backend_restarts = Counter(
            f"{PREFIX}_backend_restarts",
            "Times the backend crashed or stopped and was rebuilt.",
            registry=registry,
        )

    def rpc_finished(self, method: str, resource: str, seconds: float) -> None:
        # labels() validates and locks on every call: a few microseconds of each
        # Allocate. The children never change once made, so each is looked up once.
        key = (method, resource)
        child = self._rpc_children.get(key)
        if child is None:
            child = self._rpc_children[key] = self._rpc.labels(method, resource)
        child.observe(seconds)

    def allocated(self, resource: str, devices: int) -> None:
        children = self._allocation_children.get(resource)
        if children is None:
            children = self._allocation_children[resource] = (
                self._allocations.labels(resource),
                self._allocated_devices.labels(resource),
            )
        children[0].inc()
        children[1].inc(devices)

    def allocation_failed(self, resource: str, reason: AllocationFailure) -> None:
        self._allocation_errors.labels(resource, str(reason)).inc()

    def registered(self, resource: str) -> None:
        self._registrations.labels(resource).inc()
        # Zero series from the first registration on: rate() then sees the first event.
        self._allocations.labels(resource)
        self._allocated_devices.labels(resource)
        self._streams_opened.labels(resource)
        for reason in AllocationFailure:
            self._allocation_errors.labels(resource, str(reason))

    def registration_failed(self, resource: str) -> None:
        self._registration_failures.labels(resource).inc()

    def stream_opened(self, resource: str) -> None:
        self._streams_opened.labels(resource).inc()

    def kubelet_restarted(self) -> None:
        self._kubelet_restarts.inc()

    def server_restarted(self, resource: str, reason: RestartReason) -> None:
        self._server_restarts.labels(resource, str(reason)).inc()

    def backend_restarted(self) -> None:
        self._backend_restarts.inc()
