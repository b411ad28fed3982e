"""What the framework tells a metrics system while it works, and what a resource reports.

The servicer, the lifecycle and the manager report events through this small
Protocol; ``accel_plugins.metrics`` implements it with Prometheus counters and
histograms. The framework itself never imports a metrics library, and without
a recorder every call goes to :data:`NO_METRICS`.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Protocol


class AllocationFailure(enum.StrEnum):
    """Why an Allocate request (one container's part of it) was refused.

    A closed set, so the ``reason`` label stays small.
    """

    EMPTY_REQUEST = "empty_request"
    UNKNOWN_DEVICE = "unknown_device"
    UNHEALTHY_DEVICE = "unhealthy_device"
    DUPLICATE_DEVICE = "duplicate_device"
    BACKEND_REFUSED = "backend_refused"  # the backend's allocate raised AllocationError
    BACKEND_ERROR = "backend_error"  # the backend's allocate crashed


class RestartReason(enum.StrEnum):
    """Why a resource's gRPC server was started afresh."""

    SOCKET_REMOVED = "socket_removed"  # the kubelet wiped the plugin directory
    OPTIONS_CHANGED = "options_changed"  # a reload changed the advertised options


class PluginMetrics(Protocol):
    """Event sink of the framework; every method must be cheap and never raise."""

    def rpc_finished(self, method: str, resource: str, seconds: float) -> None:
        """A unary DevicePlugin RPC ended (answered or failed) after ``seconds``."""
        ...

    def allocated(self, resource: str, devices: int) -> None:
        """One container's allocation succeeded with ``devices`` devices."""
        ...

    def allocation_failed(self, resource: str, reason: AllocationFailure) -> None: ...

    def registered(self, resource: str) -> None:
        """The kubelet accepted a Register call."""
        ...

    def registration_failed(self, resource: str) -> None: ...

    def stream_opened(self, resource: str) -> None:
        """The kubelet opened ListAndWatch; its first answer is on its way."""
        ...

    def kubelet_restarted(self) -> None:
        """The kubelet's socket came back as a new file: a new kubelet is running."""
        ...

    def server_restarted(self, resource: str, reason: RestartReason) -> None: ...

    def backend_restarted(self) -> None:
        """The backend crashed or stopped and is being rebuilt."""
        ...


class NoMetrics:
    """Records nothing: the default when nobody collects metrics."""

    def rpc_finished(self, method: str, resource: str, seconds: float) -> None:
        pass

    def allocated(self, resource: str, devices: int) -> None:
        pass

    def allocation_failed(self, resource: str, reason: AllocationFailure) -> None:
        pass

    def registered(self, resource: str) -> None:
        pass

    def registration_failed(self, resource: str) -> None:
        pass

    def stream_opened(self, resource: str) -> None:
        pass

    def kubelet_restarted(self) -> None:
        pass

    def server_restarted(self, resource: str, reason: RestartReason) -> None:
        pass

    def backend_restarted(self) -> None:
        pass


NO_METRICS: PluginMetrics = NoMetrics()


_EVENTS = (
    "rpc_finished",
    "allocated",
    "allocation_failed",
    "registered",
    "registration_failed",
    "stream_opened",
    "kubelet_restarted",
    "server_restarted",
    "backend_restarted",
)


class DeferredMetrics(NoMetrics):
    """Keeps the framework's events until the real recorder is attached, then forwards.

    A plugin process registers before it loads its metrics library (issue 17):
    the events of those first milliseconds are kept in order and replayed into
    the recorder given to :meth:`attach`, after which each method is the
    recorder's own. ``streamed`` holds the resources whose ListAndWatch the
    kubelet has opened, and ``changed`` is set at each such event (event loop
    only), so the caller can wait until the kubelet has the devices.
    """

    def __init__(self) -> None:
        self._held: list[tuple[str, tuple[object, ...]]] = []
        self.streamed: set[str] = set()
        self.changed = asyncio.Event()
        for name in _EVENTS:
            setattr(self, name, self._holder(name))

    def _holder(self, name: str) -> object:
        def hold(*args: object) -> None:
            self._held.append((name, args))
            if name == "stream_opened":
                self.streamed.add(str(args[0]))
                self.changed.set()

        return hold

    def attach(self, recorder: PluginMetrics) -> None:
        """Replay what was held into ``recorder`` and forward everything from now on."""
        for name in _EVENTS:
            setattr(self, name, getattr(recorder, name))
        held, self._held = self._held, []
        for name, args in held:
            getattr(recorder, name)(*args)


@dataclass(frozen=True, slots=True)
class PluginStatus:
    """What one resource's server reports of itself, for /metrics and /healthz."""

    resource: str
    serving: bool
    registered: bool
    devices: int
    healthy: int
    open_streams: int
    registrations: int
