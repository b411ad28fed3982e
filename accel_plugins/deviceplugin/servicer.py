"""The DevicePlugin gRPC service for one resource.

Holds the resource's current devices, fans every change out to all open
ListAndWatch streams and answers the unary RPCs. Request problems become
gRPC status codes with messages; nothing a caller sends can crash it.

Backend hooks (allocate, preferred allocation, pre-start, CDI specs) go through the
runtime's one hook rule (:mod:`accel_plugins.runtime.hooks`): a worker thread, the hook
deadline, the same error mapping and log line as in DRA mode. Here a failure becomes
the gRPC status it names, and the resource keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.deviceplugin.convert import device_message, fill_container_response
from accel_plugins.errors import AllocationError
from accel_plugins.plugin import allocation
from accel_plugins.plugin.device import ContainerAllocation, Device
from accel_plugins.runtime.capabilities import Capabilities
from accel_plugins.runtime.hooks import HookFailedError, HookRunner
from accel_plugins.runtime.recorder import NO_METRICS, AllocationFailure, PluginMetrics

log = logging.getLogger(__name__)

# The kubelet's gRPC client refuses messages above its default receive limit.
KUBELET_MAX_MESSAGE_BYTES = 4 * 1024 * 1024

_T = TypeVar("_T")
_AnyContext = grpc.aio.ServicerContext[Any, Any]


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    def __init__(
        self,
        resource: str,
        capabilities: Capabilities,
        devices: Mapping[str, Device] | None = None,
        *,
        metrics: PluginMetrics = NO_METRICS,
    ) -> None:
        self.resource = resource
        self.capabilities = capabilities
        self.metrics = metrics
        self._devices: Mapping[str, Device] = {}
        self._messages: dict[str, tuple[Device, pb.Device]] = {}
        self._response = pb.ListAndWatchResponse()
        self._generation = 0
        self._changed = asyncio.Event()
        self._closed = False
        self.open_streams = 0
        self.update(devices or {})
        self._prefers = capabilities.prefers(resource, self._devices.values())

    # -- state ---------------------------------------------------------------

    @property
    def devices(self) -> Mapping[str, Device]:
        return self._devices

    def options(self) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(
            pre_start_required=self.capabilities.pre_start_required,
            get_preferred_allocation_available=self._prefers,
        )

    def refresh_options(self) -> bool:
        """Re-derive the options after a device change; True when the kubelet must hear them.

        GetPreferredAllocation, once advertised, stays advertised: a device
        leaving should not cost a re-registration, and answering it is harmless.
        """
        if self._prefers:
            return False
        self._prefers = self.capabilities.prefers(self.resource, self._devices.values())
        return self._prefers

    def set_capabilities(self, capabilities: Capabilities) -> bool:
        """Take a new backend's hooks; True when the options changed."""
        before = self.options()
        self.capabilities = capabilities
        self._prefers = capabilities.prefers(self.resource, self._devices.values())
        return self.options() != before

    def update(self, devices: Mapping[str, Device]) -> bool:
        """Take a new device list; returns False when it was too large to send."""
        messages: dict[str, tuple[Device, pb.Device]] = {}
        for device_id, device in devices.items():
            cached = self._messages.get(device_id)
            # Reuse the message of an unchanged device: a health flip on one of
            # 10,000 devices then costs one conversion, not 10,000.
            if cached is not None and cached[0] == device:
                messages[device_id] = cached
            else:
                messages[device_id] = (device, device_message(device))
        response = pb.ListAndWatchResponse(devices=[m for _, m in messages.values()])
        size = response.ByteSize()
        if size > KUBELET_MAX_MESSAGE_BYTES:
            log.error(
                "resource %s: not sending %d devices: the ListAndWatch message would be %d bytes, "
                "over the kubelet's %d-byte limit; the kubelet keeps the previous list",
                self.resource,
                len(devices),
                size,
                KUBELET_MAX_MESSAGE_BYTES,
            )
            return False
        self._devices = dict(devices)
        self._messages = messages
        self._response = response
        self._generation += 1
        self._wake()
        return True

    def close(self) -> None:
        """End every ListAndWatch stream cleanly (status OK)."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- RPCs ----------------------------------------------------------------

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[pb.Empty, pb.DevicePluginOptions]
    ) -> pb.DevicePluginOptions:
        with self._timed("GetDevicePluginOptions"):
            return self.options()

    async def ListAndWatch(
        self,
        request: pb.Empty,
        context: grpc.aio.ServicerContext[pb.Empty, pb.ListAndWatchResponse],
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        sent = -1
        self.open_streams += 1
        self.metrics.stream_opened(self.resource)
        try:
            while not self._closed:
                if sent != self._generation:
                    sent = self._generation
                    yield self._response
                    continue
                await self._changed.wait()
        finally:
            self.open_streams -= 1

    async def GetPreferredAllocation(
        self,
        request: pb.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[
            pb.PreferredAllocationRequest, pb.PreferredAllocationResponse
        ],
    ) -> pb.PreferredAllocationResponse:
        with self._timed("GetPreferredAllocation"):
            responses = []
            for container in request.container_requests:
                async with self._guarded(context):
                    ids = await self._preferred(container)
                responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
            return pb.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(
        self,
        request: pb.AllocateRequest,
        context: grpc.aio.ServicerContext[pb.AllocateRequest, pb.AllocateResponse],
    ) -> pb.AllocateResponse:
        # Timed inline, not through _timed: Allocate is the one hot RPC (issue 17).
        started = time.perf_counter()
        try:
            if not request.container_requests:
                self.metrics.allocation_failed(self.resource, AllocationFailure.EMPTY_REQUEST)
                await self._abort(context, "the request has no container requests")
            response = pb.AllocateResponse()
            add = response.container_responses.add
            for container in request.container_requests:
                fill_container_response(add(), await self._allocate(context, container.devicesIDs))
            return response
        finally:
            self.metrics.rpc_finished("Allocate", self.resource, time.perf_counter() - started)

    async def PreStartContainer(
        self,
        request: pb.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[
            pb.PreStartContainerRequest, pb.PreStartContainerResponse
        ],
    ) -> pb.PreStartContainerResponse:
        with self._timed("PreStartContainer"):
            return await self._pre_start(request, context)

    async def _pre_start(
        self,
        request: pb.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[
            pb.PreStartContainerRequest, pb.PreStartContainerResponse
        ],
    ) -> pb.PreStartContainerResponse:
        hook = self.capabilities.pre_starter
        if hook is None:
            return pb.PreStartContainerResponse()
        devices = await self._guard(
            context,
            lambda: allocation.resolve(
                self.resource, list(request.devicesIDs), self._devices, require_healthy=False
            ),
        )
        try:
            # The devices are the kubelet's already: a refusal is a failed precondition.
            await self._hook(
                "pre-start",
                hook.pre_start,
                devices,
                refused=grpc.StatusCode.FAILED_PRECONDITION,
            )
        except HookFailedError as failure:
            await context.abort(grpc.StatusCode[failure.code], failure.message)
        return pb.PreStartContainerResponse()

    # -- helpers -------------------------------------------------------------

    @contextlib.contextmanager
    def _timed(self, method: str) -> Iterator[None]:
        # Failed calls count too: context.abort raises through here.
        started = time.perf_counter()
        try:
            yield
        finally:
            self.metrics.rpc_finished(method, self.resource, time.perf_counter() - started)

    async def _abort(self, context: _AnyContext, message: str) -> None:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"resource {self.resource}: {message}"
        )

    async def _hook(
        self,
        name: str,
        call: Callable[..., _T],
        *args: Any,
        refused: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT,
    ) -> _T:
        """Call a backend hook by the runtime's rule; HookFailedError says what to answer."""
        runner = HookRunner(self.capabilities.hook_timeout)
        return await runner.call(
            name, self.resource, functools.partial(call, self.resource, *args), refused=refused.name
        )

    async def _guard(self, context: _AnyContext, work: Callable[[], _T]) -> _T:
        """Run request handling; bad input → INVALID_ARGUMENT, a backend bug → INTERNAL."""
        async with self._guarded(context):
            return work()
        raise AssertionError("context.abort returned")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def _guarded(self, context: _AnyContext) -> AsyncIterator[None]:
        try:
            yield
        except HookFailedError as failure:
            await context.abort(grpc.StatusCode[failure.code], failure.message)
        except AllocationError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Exception as exc:
            log.exception("resource %s: request handling failed", self.resource)
            await context.abort(
                grpc.StatusCode.INTERNAL, f"resource {self.resource}: internal error: {exc}"
            )

    async def _allocate(self, context: _AnyContext, ids: Sequence[str]) -> ContainerAllocation:
        try:
            devices = allocation.resolve(self.resource, ids, self._devices, require_healthy=True)
        except AllocationError as exc:
            self.metrics.allocation_failed(self.resource, rejection(ids, self._devices))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        hook = self.capabilities.allocator
        if hook is None:
            result = allocation.merge(devices)  # no vendor code: stays on the loop
        else:
            try:
                result = await self._hook("allocate", hook.allocate, devices)
            except HookFailedError as failure:
                reason = (
                    AllocationFailure.BACKEND_REFUSED
                    if failure.refused
                    else AllocationFailure.BACKEND_ERROR
                )
                self.metrics.allocation_failed(self.resource, reason)
                await context.abort(grpc.StatusCode[failure.code], failure.message)
        keeper = self.capabilities.cdi_keeper
        if keeper is not None:
            # The answer may name CDI devices: their specs must be on disk first.
            try:
                await self._hook("ensure_cdi_specs", keeper.ensure_cdi_specs)
            except HookFailedError as failure:
                self.metrics.allocation_failed(self.resource, AllocationFailure.BACKEND_ERROR)
                await context.abort(grpc.StatusCode[failure.code], failure.message)
        self.metrics.allocated(self.resource, len(devices))
        return result

    async def _preferred(self, request: pb.ContainerPreferredAllocationRequest) -> list[str]:
        size = request.allocation_size
        # Available IDs we no longer know are skipped (the kubelet's view can lag
        # ours by one update); must-include IDs have to be real.
        available = [
            self._devices[i]
            for i in dict.fromkeys(request.available_deviceIDs)
            if i in self._devices
        ]
        must = (
            allocation.resolve(
                self.resource,
                list(request.must_include_deviceIDs),
                self._devices,
                require_healthy=False,
            )
            if request.must_include_deviceIDs
            else []
        )
        allocation.check_preferred_request(self.resource, available, must, size)
        policy = self.capabilities.preferred
        if policy is not None:
            # A topology search may take a while on a large asymmetric node: the
            # hook rule keeps the event loop (ListAndWatch, other RPCs) free.
            answer = list(
                await self._hook(
                    "preferred allocation", policy.preferred_allocation, available, must, size
                )
            )
            problem = _check_answer(answer, available, must, size)
            if problem is None:
                return answer
            log.error(
                "resource %s: backend preferred allocation %s (%s); using the default policy",
                self.resource,
                answer,
                problem,
            )
        return allocation.prefer_fewest_numa_nodes(available, must, size)


def rejection(ids: Sequence[str], known: Mapping[str, Device]) -> AllocationFailure:
    """The first of the problems ``allocation.resolve`` names, as a metrics reason."""
    if not ids:
        return AllocationFailure.EMPTY_REQUEST
    if any(i not in known for i in ids):
        return AllocationFailure.UNKNOWN_DEVICE
    if any(not known[i].healthy for i in ids):
        return AllocationFailure.UNHEALTHY_DEVICE
    return AllocationFailure.DUPLICATE_DEVICE


def _check_answer(
    answer: list[str], available: Sequence[Device], must: Sequence[Device], size: int
) -> str | None:
    if len(answer) != size or len(set(answer)) != size:
        return f"expected {size} distinct IDs"
    if not set(answer) <= {d.id for d in available}:
        return "names devices that are not available"
    if not {d.id for d in must} <= set(answer):
        return "leaves out must-include devices"
    return None
