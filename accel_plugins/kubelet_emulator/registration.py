"""The kubelet's Registration service on ``kubelet.sock``.

The servicer stays thin: it hands each RegisterRequest to a handler (the
emulator) and turns a ``RegistrationRefusedError`` into a gRPC error status, which is
what a plugin sees when the real kubelet refuses it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.kubelet_emulator.model import PluginOptions
from accel_plugins.kubelet_emulator.names import resource_name_problem, version_problem


@dataclass(frozen=True, slots=True)
class Registration:
    """An accepted registration: a Register call, or a plugin the plugin watcher found.

    ``options`` are those a Register request carried; for the plugin watcher,
    which has no request, those GetDevicePluginOptions answered. ``endpoint`` is
    relative to the device plugin directory for Register, and the path GetInfo
    named for the plugin watcher.
    """

    version: str
    endpoint: str
    resource_name: str
    options: PluginOptions
    at: float  # time.monotonic() when accepted
    source: str = "register"  # or "plugin watcher (<registration socket>)"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A refused Register call and the reason sent back to the plugin."""

    version: str
    endpoint: str
    resource_name: str
    reason: str
    code: grpc.StatusCode
    at: float


class RegistrationRefusedError(Exception):
    """Raised by a handler to refuse a registration with this status and message."""

    def __init__(self, code: grpc.StatusCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def request_problem(request: pb.RegisterRequest) -> str | None:
    """Why the request is invalid on its face (before dialing the plugin), or None."""
    problem = version_problem(request.version) or resource_name_problem(request.resource_name)
    if problem:
        return problem
    if not request.endpoint:
        return "endpoint must name the plugin's socket file in the device plugin directory"
    if request.endpoint.startswith("/"):
        return (
            f"endpoint {request.endpoint!r} must be relative to the device plugin directory, "
            "not an absolute path"
        )
    return None


RegisterHandler = Callable[[pb.RegisterRequest], Awaitable[None]]


class RegistrationServicer(pb_grpc.RegistrationServicer):
    """Answers Register by awaiting the handler; a refusal becomes an error status."""

    def __init__(self, handler: RegisterHandler) -> None:
        self._handler = handler

    async def Register(
        self,
        request: pb.RegisterRequest,
        context: grpc.aio.ServicerContext[pb.RegisterRequest, pb.Empty],
    ) -> pb.Empty:
        try:
            await self._handler(request)
        except RegistrationRefusedError as refused:
            await context.abort(refused.code, refused.reason)
        return pb.Empty()
