"""The kubelet's DRA gRPC services on the driver's socket: DRAPlugin v1 and v1beta1,
and DRAResourceHealth v1 and v1alpha1 (the same messages; one stream, written twice).

v1beta1 (kubelets 1.32 and 1.33) has v1's messages less ``Device.share_id``,
with the same field numbers: a v1beta1 request is read as v1 from its bytes
and the v1 answer is written back the same way, so both versions share one
implementation and cannot drift apart. ``share_id`` is set only for a claim
holding a share of a device (KEP-5075), which an API server that old never
allocates; it would reach such a kubelet as an unknown field, which protobuf skips.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from accel_plugins.api import dra_health_v1_pb2 as health_v1
from accel_plugins.api import dra_health_v1_pb2_grpc as health_v1_grpc
from accel_plugins.api import dra_health_v1alpha1_pb2 as health_pb
from accel_plugins.api import dra_health_v1alpha1_pb2_grpc as health_grpc
from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.api import dra_v1_pb2_grpc as v1_grpc
from accel_plugins.api import dra_v1beta1_pb2 as v1beta1
from accel_plugins.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from accel_plugins.dra.checkpoint import PreparedClaim
from accel_plugins.dra.health import DeviceHealthState, HealthFeed
from accel_plugins.dra.model import ClaimRef
from accel_plugins.dra.prepare import Preparer
from accel_plugins.dra.request_metrics import Operation, RequestMetrics, measured
from accel_plugins.runtime.server import SocketServer

log = logging.getLogger(__name__)

# What the kubelet looks for in GetInfo's supported_versions (the DRAPluginService
# constants of k8s.io/kubelet/pkg/apis/dra/v1 and v1beta1).
SERVICE_V1 = "v1.DRAPlugin"
SERVICE_V1BETA1 = "v1beta1.DRAPlugin"
# The health services, named the same way (the DRAResourceHealthService constants of
# k8s.io/kubelet/pkg/apis/dra-health/v1 and v1alpha1). A 1.37 kubelet picks v1 when
# both are listed, else v1alpha1 (pkg/kubelet/cm/dra/plugin, TestPickHealthService);
# older ones ignore names they do not know and call v1alpha1 directly.
HEALTH_SERVICE_V1 = "v1.DRAResourceHealth"
HEALTH_SERVICE_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
SUPPORTED_VERSIONS = (SERVICE_V1, SERVICE_V1BETA1, HEALTH_SERVICE_V1, HEALTH_SERVICE_V1ALPHA1)

_M = TypeVar("_M", bound=Message)


class MalformedRequestError(ValueError):
    """A request the kubelet never sends: answered with INVALID_ARGUMENT."""


def claim_refs(claims: Sequence[v1.Claim]) -> list[ClaimRef]:
    """The request's claims; every field is required and each UID may come once."""
    refs: list[ClaimRef] = []
    seen: set[str] = set()
    for i, claim in enumerate(claims):
        missing = [f for f in ("uid", "namespace", "name") if not getattr(claim, f)]
        if missing:
            raise MalformedRequestError(f"claims[{i}]: {', '.join(missing)} must not be empty")
        if claim.uid in seen:
            raise MalformedRequestError(f"claims[{i}]: claim UID {claim.uid} is given twice")
        seen.add(claim.uid)
        refs.append(ClaimRef(uid=claim.uid, namespace=claim.namespace, name=claim.name))
    return refs


def prepare_response(claim: PreparedClaim) -> v1.NodePrepareResourceResponse:
    return v1.NodePrepareResourceResponse(
        devices=[
            v1.Device(
                request_names=list(d.requests),
                pool_name=d.pool,
                device_name=d.device,
                cdi_device_ids=list(d.cdi_ids),
                share_id=d.share_id or None,
            )
            for d in claim.devices
        ]
    )


class DraPluginServicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` over a :class:`Preparer`."""

    def __init__(self, preparer: Preparer, request_metrics: RequestMetrics | None = None) -> None:
        self.preparer = preparer
        self.request_metrics = request_metrics

    @measured(Operation.PREPARE)
    async def NodePrepareResources(
        self,
        request: v1.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            v1.NodePrepareResourcesRequest, v1.NodePrepareResourcesResponse
        ],
    ) -> v1.NodePrepareResourcesResponse:
        refs = await _refs(request.claims, context)
        results = await self.preparer.prepare(refs)
        response = v1.NodePrepareResourcesResponse()
        for uid, result in results.items():
            if isinstance(result, str):
                response.claims[uid].error = result
            else:
                response.claims[uid].CopyFrom(prepare_response(result))
        return response

    @measured(Operation.UNPREPARE)
    async def NodeUnprepareResources(
        self,
        request: v1.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            v1.NodeUnprepareResourcesRequest, v1.NodeUnprepareResourcesResponse
        ],
    ) -> v1.NodeUnprepareResourcesResponse:
        refs = await _refs(request.claims, context)
        results = await self.preparer.unprepare(refs)
        response = v1.NodeUnprepareResourcesResponse()
        for uid, error in results.items():
            response.claims[uid].error = error
        return response


async def _refs(
    claims: Sequence[v1.Claim], context: grpc.aio.ServicerContext[Any, Any]
) -> list[ClaimRef]:
    try:
        return claim_refs(claims)
    except MalformedRequestError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        raise AssertionError("context.abort returned") from exc  # pragma: no cover


def _as(kind: type[_M], message: Message) -> _M:
    """The same bytes read as ``kind``: v1 and v1beta1 share field numbers."""
    return kind.FromString(message.SerializeToString())


class DraPluginV1Beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``: the v1 one, through the wire format."""

    def __init__(self, v1_servicer: DraPluginServicer) -> None:
        self._v1 = v1_servicer

    async def NodePrepareResources(
        self,
        request: v1beta1.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            v1beta1.NodePrepareResourcesRequest, v1beta1.NodePrepareResourcesResponse
        ],
    ) -> v1beta1.NodePrepareResourcesResponse:
        answer = await self._v1.NodePrepareResources(
            _as(v1.NodePrepareResourcesRequest, request),
            context,  # type: ignore[arg-type]
        )
        return _as(v1beta1.NodePrepareResourcesResponse, answer)

    async def NodeUnprepareResources(
        self,
        request: v1beta1.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            v1beta1.NodeUnprepareResourcesRequest, v1beta1.NodeUnprepareResourcesResponse
        ],
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        answer = await self._v1.NodeUnprepareResources(
            _as(v1.NodeUnprepareResourcesRequest, request),
            context,  # type: ignore[arg-type]
        )
        return _as(v1beta1.NodeUnprepareResourcesResponse, answer)


def health_response(
    stamp: int, states: Sequence[DeviceHealthState], timeout: int = 0
) -> health_v1.NodeWatchResourcesResponse:
    """One full list as v1 writes it (v1alpha1's messages are the same, field for field).

    ``timeout`` is health_check_timeout_seconds: how long the kubelet (1.35+) may go
    without a list before it counts a device as Unknown."""
    return health_v1.NodeWatchResourcesResponse(
        devices=[
            health_v1.DeviceHealth(
                device=health_v1.DeviceIdentifier(pool_name=s.pool, device_name=s.device),
                health=health_v1.HEALTHY if s.healthy else health_v1.UNHEALTHY,
                last_updated_time=stamp,
                message=s.message,
                health_check_timeout_seconds=timeout,
            )
            for s in states
        ]
    )


class DraHealthServicer(health_v1_grpc.DRAResourceHealthServicer):
    """``v1.DRAResourceHealth``: the devices' health from :class:`HealthFeed`."""

    def __init__(self, feed: HealthFeed) -> None:
        self.feed = feed

    async def NodeWatchResources(
        self,
        request: health_v1.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[
            health_v1.NodeWatchResourcesRequest, health_v1.NodeWatchResourcesResponse
        ],
    ) -> AsyncIterator[health_v1.NodeWatchResourcesResponse]:
        async for stamp, states in self.feed.watch():
            yield health_response(stamp, states, self.feed.timeout_seconds)


class DraHealthV1Alpha1Servicer(health_grpc.DRAResourceHealthServicer):
    """``v1alpha1.DRAResourceHealth``: the v1 stream, through the wire format."""

    def __init__(self, feed: HealthFeed) -> None:
        self.feed = feed

    async def NodeWatchResources(
        self,
        request: health_pb.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[
            health_pb.NodeWatchResourcesRequest, health_pb.NodeWatchResourcesResponse
        ],
    ) -> AsyncIterator[health_pb.NodeWatchResourcesResponse]:
        async for stamp, states in self.feed.watch():
            answer = health_response(stamp, states, self.feed.timeout_seconds)
            yield _as(health_pb.NodeWatchResourcesResponse, answer)


class DraServer(SocketServer):
    """The three services on ``<kubelet-plugins-dir>/<driver>/dra.sock`` (mode 0600)."""

    def __init__(
        self,
        preparer: Preparer,
        feed: HealthFeed,
        socket_path: Path,
        request_metrics: RequestMetrics | None = None,
    ) -> None:
        plugin = DraPluginServicer(preparer, request_metrics)
        beta = DraPluginV1Beta1Servicer(plugin)
        health = DraHealthServicer(feed)
        health_alpha = DraHealthV1Alpha1Servicer(feed)

        def add(server: grpc.aio.Server) -> None:
            v1_grpc.add_DRAPluginServicer_to_server(plugin, server)
            v1beta1_grpc.add_DRAPluginServicer_to_server(beta, server)
            health_v1_grpc.add_DRAResourceHealthServicer_to_server(health, server)
            health_grpc.add_DRAResourceHealthServicer_to_server(health_alpha, server)

        super().__init__(socket_path, add, directory_flag="--kubelet-plugins-dir")

    async def start(self) -> None:
        await self._serve()

    async def stop(self, grace: float = 0.5) -> None:
        """Stop serving; open health streams end after ``grace`` (the driver closes the
        feed first on shutdown, so they end at once; a socket served again keeps it)."""
        await self._stop_serving(grace)
