"""NodePrepareResources and NodeUnprepareResources, counted by outcome and timed.

Named after the two drivers that have such series (no name is copied whole:
ours start ``accel_plugins_dra_`` like the slice publisher's):

- The Kubernetes reference driver, kubernetes-sigs/dra-example-driver
  ``pkg/metrics/driver.go`` (observed per claim in
  ``cmd/dra-example-kubeletplugin/driver.go``):
  ``dra_example_driver_prepare_claims_total`` and ``..._unprepare_claims_total``
  by ``result`` (``success``, ``error``), zero from the start, and histograms
  ``..._prepare_claim_duration_seconds`` / ``..._unprepare_claim_duration_seconds``
  by ``result`` with the client's default buckets (5 ms to 10 s). Ours:
  ``accel_plugins_dra_prepare_claims_total`` and
  ``accel_plugins_dra_unprepare_claims_total``, labels ``driver``, ``result``.
- NVIDIA's k8s-dra-driver-gpu ``pkg/metrics/dra_requests.go``:
  ``nvidia_dra_requests_total`` and ``nvidia_dra_request_duration_seconds`` by
  ``driver`` and ``operation`` (``prepare``, ``unprepare``; buckets 50 ms
  doubling to 12.8 s), series made at start-up for the driver, besides
  in-flight, prepared-device and error-type series. Ours:
  ``accel_plugins_dra_requests_total{driver, operation, result}`` and
  ``accel_plugins_dra_request_duration_seconds{driver, operation}``.

The kubeletplugin library (k8s.io/dynamic-resource-allocation) has none; the
kubelet times the same calls from its side (``dra_grpc_operations_duration_seconds``).

A request's claims are prepared together (one API read each, side by side,
then one checkpoint write), so a claim takes as long as its request: one
histogram, per request, times both. A request that gets an answer counts
``success`` (no claim failed) or ``claim_error`` (some claim carries an
error; the kubelet retries them); one that ends in a gRPC status instead
counts ``grpc_error`` (INVALID_ARGUMENT for a malformed request, CANCELLED
when the kubelet stopped waiting, UNKNOWN for a bug), and its claims none.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.metrics.collectors import PREFIX

# The reference driver's buckets (the Prometheus client's defaults, 5 ms to 10 s), with
# 1 and 2.5 ms below (a repeated Prepare is answered from memory) and 30 s above (the
# kubelet waits 45 s; backend hooks that touch hardware may take seconds).
DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class Operation(StrEnum):
    PREPARE = "prepare"
    UNPREPARE = "unprepare"


class RequestResult(StrEnum):
    SUCCESS = "success"
    CLAIM_ERROR = "claim_error"
    GRPC_ERROR = "grpc_error"


class ClaimResult(StrEnum):
    SUCCESS = "success"
    ERROR = "error"


class RequestMetrics:
    """The request and claim series of the driver ``driver``, in ``registry``.

    Every series of the driver exists (at zero) from construction on, as both
    models have it: ``rate()`` sees the first request, and an alert on errors has a
    series before the first error.
    """

    def __init__(self, driver: str, registry: CollectorRegistry | None = None) -> None:
        self.driver = driver
        requests = Counter(
            f"{PREFIX}_dra_requests",
            "NodePrepareResources and NodeUnprepareResources calls, by operation and result: "
            "success, claim_error (answered, some claim failed), grpc_error (no answer).",
            ["driver", "operation", "result"],
            registry=registry,
        )
        duration = Histogram(
            f"{PREFIX}_dra_request_duration_seconds",
            "Time to answer NodePrepareResources or NodeUnprepareResources (failed calls "
            "included).",
            ["driver", "operation"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        claims = {
            op: Counter(
                f"{PREFIX}_dra_{op}_claims",
                f"Claims answered by Node{op.capitalize()}Resources, by result (success, error).",
                ["driver", "result"],
                registry=registry,
            )
            for op in Operation
        }
        # Children looked up once: labels() validates and locks on every call.
        self._requests = {
            (op, r): requests.labels(driver, op, r) for op in Operation for r in RequestResult
        }
        self._duration = {op: duration.labels(driver, op) for op in Operation}
        self._claims = {
            (op, r): claims[op].labels(driver, r) for op in Operation for r in ClaimResult
        }

    def observe(self, operation: Operation, seconds: float, errors: Iterable[str] | None) -> None:
        """One request that took ``seconds``: ``errors`` has each claim's error ("" when it
        succeeded); None when the call ended in a gRPC status instead of an answer."""
        self._duration[operation].observe(seconds)
        if errors is None:
            self._requests[operation, RequestResult.GRPC_ERROR].inc()
            return
        failed = total = 0
        for error in errors:
            total += 1
            failed += bool(error)
        if total - failed:
            self._claims[operation, ClaimResult.SUCCESS].inc(total - failed)
        if failed:
            self._claims[operation, ClaimResult.ERROR].inc(failed)
        result = RequestResult.CLAIM_ERROR if failed else RequestResult.SUCCESS
        self._requests[operation, result].inc()


class Measured(Protocol):
    """A DRAPlugin servicer whose calls are counted (when it has metrics)."""

    @property
    def request_metrics(self) -> RequestMetrics | None: ...


_S = TypeVar("_S", bound=Measured)
_Q = TypeVar("_Q")
_C = TypeVar("_C")
_A = TypeVar("_A", v1.NodePrepareResourcesResponse, v1.NodeUnprepareResourcesResponse)
_Handler = Callable[[_S, _Q, _C], Awaitable[_A]]


def measured(
    operation: Operation,
) -> Callable[[_Handler[_S, _Q, _C, _A]], Callable[[_S, _Q, _C], Coroutine[Any, Any, _A]]]:
    """Count and time a v1 DRAPlugin method in its servicer's ``request_metrics``.

    The wrapper is a coroutine function, as grpc.aio needs to await it; exceptions
    (``context.abort`` included) and cancellation pass through, counted.
    """

    def wrap(handler: _Handler[_S, _Q, _C, _A]) -> Callable[[_S, _Q, _C], Coroutine[Any, Any, _A]]:
        @functools.wraps(handler)
        async def call(self: _S, request: _Q, context: _C) -> _A:
            metrics = self.request_metrics
            if metrics is None:
                return await handler(self, request, context)
            started = time.perf_counter()
            try:
                answer = await handler(self, request, context)
            except BaseException:
                metrics.observe(operation, time.perf_counter() - started, None)
                raise
            errors = [claim.error for claim in answer.claims.values()]
            metrics.observe(operation, time.perf_counter() - started, errors)
            return answer

        return call

    return wrap
