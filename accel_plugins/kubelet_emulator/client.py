"""``PluginClient``: a typed asyncio client for one device plugin socket.

Speaks only the public v1beta1 DevicePlugin API, so it works against any
vendor's plugin. Every gRPC failure comes out as a ``PluginCallError`` carrying
the method, the status code and the plugin's message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.kubelet_emulator.errors import InvalidPluginAnswerError, PluginCallError
from accel_plugins.kubelet_emulator.model import ContainerResponse, DeviceState, PluginOptions

DEFAULT_TIMEOUT = 5.0


def unix_target(socket_path: Path) -> str:
    """The gRPC target for a unix socket; a relative path stays relative to the cwd.

    Keeping it relative lets a caller reach a socket whose absolute path is over
    the 107-byte sun_path limit by running from its directory.
    """
    path = Path(socket_path)
    return f"unix://{path}" if path.is_absolute() else f"unix:{path}"


def _id_list(value: object, what: str) -> list[str]:
    """``value`` as a list of device IDs, or TypeError naming ``what``.

    A bare string is refused: iterating it would send one ID per character
    (``"gpu0"`` -> ``g, p, u, 0``), and type checkers cannot catch it because
    a ``str`` is itself a ``Sequence[str]``.
    """
    if isinstance(value, str | bytes | bytearray):
        raise TypeError(
            f"{what} must be a list of device IDs, not the {type(value).__name__} {value!r} "
            f"(one device: [{value!r}])"
        )
    if not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a list of device IDs, got {value!r}")
    ids = list(value)
    for item in ids:
        if not isinstance(item, str):
            raise TypeError(f"{what}: a device ID is a str, got {item!r}")
    return ids


class PluginClient:
    """Async context manager over a gRPC channel to ``unix://<socket_path>``.

    ``timeout`` is the deadline of each unary call (sent to the plugin as a gRPC
    deadline); the ListAndWatch stream has none.
    """

    def __init__(self, socket_path: Path, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.DevicePluginAsyncStub | None = None

    async def __aenter__(self) -> Self:
        self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def open(self) -> None:
        """Create the channel; connecting happens lazily on the first call."""
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(unix_target(self.socket_path))
            self._stub = pb_grpc.DevicePluginStub(self._channel)

    async def close(self) -> None:
        """Close the channel, cancelling any call still running; idempotent."""
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close(None)

    @property
    def stub(self) -> pb_grpc.DevicePluginAsyncStub:
        if self._stub is None:
            raise RuntimeError(f"PluginClient for {self.socket_path} is not open")
        return self._stub

    def _error(self, method: str, error: grpc.aio.AioRpcError) -> PluginCallError:
        return PluginCallError.from_rpc(method, self.socket_path, error)

    async def options(self) -> PluginOptions:
        """GetDevicePluginOptions."""
        try:
            msg = await self.stub.GetDevicePluginOptions(pb.Empty(), timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            raise self._error("GetDevicePluginOptions", e) from None
        return PluginOptions.from_proto(msg)

    async def list_and_watch(self) -> AsyncGenerator[list[DeviceState], None]:
        """ListAndWatch: yields the complete device list of every message until the stream ends.

        A clean end of the stream just stops the iteration; a failed stream
        raises ``PluginCallError`` (e.g. UNAVAILABLE when the plugin went away).
        """
        call = self.stub.ListAndWatch(pb.Empty())
        try:
            async for msg in call:
                yield [DeviceState.from_proto(d) for d in msg.devices]
        except grpc.aio.AioRpcError as e:
            raise self._error("ListAndWatch", e) from None
        finally:
            call.cancel()

    async def first_devices(self, timeout: float | None = None) -> list[DeviceState]:
        """The first ListAndWatch message, then the stream is closed."""
        limit = timeout or self.timeout
        stream = self.list_and_watch()
        async with contextlib.aclosing(stream):
            try:
                async with asyncio.timeout(limit):
                    async for devices in stream:
                        return devices
            except TimeoutError:
                raise PluginCallError(
                    "ListAndWatch",
                    self.socket_path,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no device list within {limit:g}s",
                ) from None
        raise InvalidPluginAnswerError(
            f"ListAndWatch on {self.socket_path}: stream ended before the first device list"
        )

    async def preferred(
        self,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
    ) -> list[str]:
        """GetPreferredAllocation for one container; returns the plugin's pick, unvalidated."""
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=_id_list(available, "preferred(): available"),
                    must_include_deviceIDs=_id_list(must_include, "preferred(): must_include"),
                    allocation_size=size,
                )
            ]
        )
        try:
            msg = await self.stub.GetPreferredAllocation(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            raise self._error("GetPreferredAllocation", e) from None
        if len(msg.container_responses) != 1:
            raise InvalidPluginAnswerError(
                f"GetPreferredAllocation on {self.socket_path}: expected 1 container response, "
                f"got {len(msg.container_responses)}"
            )
        return list(msg.container_responses[0].deviceIDs)

    async def allocate(self, containers: Sequence[Sequence[str]]) -> list[ContainerResponse]:
        """Allocate: one device-id list per container, one response per container.

        ``allocate([["gpu0", "gpu1"]])`` asks for two devices in one container;
        a bare string where a list belongs raises TypeError before any call.
        """
        if isinstance(containers, str | bytes | bytearray):
            raise TypeError(
                "allocate() takes one list of device IDs per container, not the "
                f"{type(containers).__name__} {containers!r} (one device: [[{containers!r}]])"
            )
        requests = [_id_list(ids, f"allocate(): container {i}") for i, ids in enumerate(containers)]
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devicesIDs=ids) for ids in requests]
        )
        try:
            msg = await self.stub.Allocate(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            raise self._error("Allocate", e) from None
        if len(msg.container_responses) != len(requests):
            raise InvalidPluginAnswerError(
                f"Allocate on {self.socket_path}: expected {len(requests)} container "
                f"response(s), got {len(msg.container_responses)}"
            )
        return [ContainerResponse.from_proto(r) for r in msg.container_responses]

    async def pre_start(self, device_ids: Sequence[str]) -> None:
        """PreStartContainer."""
        request = pb.PreStartContainerRequest(
            devicesIDs=_id_list(device_ids, "pre_start(): device_ids")
        )
        try:
            await self.stub.PreStartContainer(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            raise self._error("PreStartContainer", e) from None
