"""DeferredMetrics: what a plugin process records before its metrics library is loaded.

cli.serve registers with the kubelet first and loads prometheus_client after
(issue 17); the events of those first milliseconds must reach the real
recorder, in order, and later events must go straight to it.
"""

from __future__ import annotations

import asyncio

from accel_plugins.runtime import recorder
from accel_plugins.runtime.recorder import (
    AllocationFailure,
    DeferredMetrics,
    NoMetrics,
    RestartReason,
)


class Recording(NoMetrics):
    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def rpc_finished(self, method: str, resource: str, seconds: float) -> None:
        self.calls.append(("rpc_finished", method, resource, seconds))

    def allocated(self, resource: str, devices: int) -> None:
        self.calls.append(("allocated", resource, devices))

    def allocation_failed(self, resource: str, reason: AllocationFailure) -> None:
        self.calls.append(("allocation_failed", resource, reason))

    def registered(self, resource: str) -> None:
        self.calls.append(("registered", resource))

    def stream_opened(self, resource: str) -> None:
        self.calls.append(("stream_opened", resource))

    def server_restarted(self, resource: str, reason: RestartReason) -> None:
        self.calls.append(("server_restarted", resource, reason))

    def backend_restarted(self) -> None:
        self.calls.append(("backend_restarted",))


def test_held_events_are_replayed_in_order_then_forwarded() -> None:
    deferred = DeferredMetrics()
    deferred.backend_restarted()
    deferred.registered("example.com/dev")
    deferred.stream_opened("example.com/dev")
    deferred.rpc_finished("Allocate", "example.com/dev", 0.001)
    target = Recording()
    deferred.attach(target)
    assert target.calls == [
        ("backend_restarted",),
        ("registered", "example.com/dev"),
        ("stream_opened", "example.com/dev"),
        ("rpc_finished", "Allocate", "example.com/dev", 0.001),
    ]
    deferred.allocated("example.com/dev", 2)
    deferred.allocation_failed("example.com/dev", AllocationFailure.UNKNOWN_DEVICE)
    deferred.server_restarted("example.com/dev", RestartReason.SOCKET_REMOVED)
    assert target.calls[4:] == [
        ("allocated", "example.com/dev", 2),
        ("allocation_failed", "example.com/dev", AllocationFailure.UNKNOWN_DEVICE),
        ("server_restarted", "example.com/dev", RestartReason.SOCKET_REMOVED),
    ]


async def test_opened_streams_are_named_and_wake_a_waiter() -> None:
    deferred = DeferredMetrics()
    waiter = asyncio.ensure_future(deferred.changed.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    deferred.stream_opened("example.com/a")
    await asyncio.wait_for(waiter, 1)
    deferred.stream_opened("example.com/b")
    assert deferred.streamed == {"example.com/a", "example.com/b"}


def test_after_attach_nothing_is_held_any_more() -> None:
    # Attached to a recorder that keeps nothing, later events go straight to it:
    # an opened stream is no longer noted here (only held events are).
    deferred = DeferredMetrics()
    deferred.kubelet_restarted()
    deferred.stream_opened("example.com/a")
    deferred.attach(NoMetrics())
    deferred.stream_opened("example.com/b")
    assert deferred.streamed == {"example.com/a"}


def test_every_event_of_the_protocol_is_held_and_forwarded() -> None:
    # A method added to PluginMetrics but not to the held events would bypass the
    # hold before attach and never reach Prometheus.
    events = {name for name in vars(NoMetrics) if not name.startswith("_")}
    assert set(recorder._EVENTS) == events
