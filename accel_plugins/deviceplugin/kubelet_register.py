"""Registering a device plugin with the kubelet: the Register call on ``kubelet.sock``."""

from __future__ import annotations

from pathlib import Path

import grpc

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.errors import RegistrationError

API_VERSION = "v1beta1"


async def register(
    kubelet_socket: Path,
    *,
    endpoint: str,
    resource: str,
    options: pb.DevicePluginOptions,
    timeout: float = 5.0,
) -> None:
    """Call Registration.Register on the kubelet; RegistrationError says why it failed."""
    if not kubelet_socket.exists():
        raise RegistrationError(f"kubelet socket {kubelet_socket} does not exist")
    request = pb.RegisterRequest(
        version=API_VERSION, endpoint=endpoint, resource_name=resource, options=options
    )
    async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
        stub = pb_grpc.RegistrationStub(channel)
        try:
            await stub.Register(request, timeout=timeout, wait_for_ready=False)
        except grpc.aio.AioRpcError as exc:
            raise RegistrationError(
                f"kubelet at {kubelet_socket} refused {resource} "
                f"({exc.code().name}: {exc.details()})"
            ) from exc
        except OSError as exc:
            raise RegistrationError(f"cannot reach the kubelet at {kubelet_socket}: {exc}") from exc
