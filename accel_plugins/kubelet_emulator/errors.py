"""Errors of the kubelet emulator and of the plugin client.

They live here rather than in ``accel_plugins.errors`` because several carry a
gRPC status code, and the shared module must stay importable without grpc.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from accel_plugins.errors import AccelPluginsError


class KubeletError(AccelPluginsError):
    """Something the emulated kubelet refused or could not do.

    ``code`` is the gRPC status a plugin answered with, when one did.
    """

    code: grpc.StatusCode | None = None


class PluginCallError(KubeletError):
    """A call to a plugin's DevicePlugin service failed."""

    code: grpc.StatusCode

    def __init__(self, method: str, socket: Path, code: grpc.StatusCode, details: str) -> None:
        self.method = method
        self.socket = socket
        self.code = code
        self.details = details
        super().__init__(f"{method} on {socket}: {code.name}: {details}")

    @classmethod
    def from_rpc(cls, method: str, socket: Path, error: grpc.aio.AioRpcError) -> PluginCallError:
        return cls(method, socket, error.code(), error.details() or "")


class InvalidPluginAnswerError(KubeletError):
    """A plugin answered, but with something the API does not allow."""


class UnknownResourceError(KubeletError):
    """No plugin ever registered this resource name (since the last start)."""


class ResourceUnavailableError(KubeletError):
    """The resource is known but its plugin is not connected right now."""


class InsufficientDevicesError(KubeletError):
    """Fewer free healthy devices than requested."""

    def __init__(self, resource: str, requested: int, available: int) -> None:
        self.resource = resource
        self.requested = requested
        self.available = available
        super().__init__(
            f"requested {requested} of {resource} but only {available} "
            "healthy unallocated devices are available"
        )


class AllocationConflictError(KubeletError):
    """A container asked again for a resource with a different count."""


class CheckpointError(KubeletError):
    """The checkpoint file cannot be read or is not in our format."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")
