"""The DevicePlugin service of one resource, served on its socket in the plugin directory."""

from __future__ import annotations

from pathlib import Path

import grpc

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.deviceplugin.servicer import DevicePluginServicer
from accel_plugins.runtime.server import SocketServer


class PluginServer(SocketServer):
    """Serves a DevicePluginServicer on ``socket_path`` until stopped."""

    def __init__(self, servicer: DevicePluginServicer, socket_path: Path) -> None:
        super().__init__(
            socket_path,
            lambda server: pb_grpc.add_DevicePluginServicer_to_server(servicer, server),
            directory_flag="--plugin-dir",
        )
        self.servicer = servicer

    async def start(self) -> None:
        """Remove a stale socket of our name and serve.

        No call to ourselves first: once start() returns, gRPC listens on the
        socket and the kubelet's connection is accepted. A probe RPC cost a client
        channel and a round trip (1 to 15 ms) on the way to registration
        (issue 17); /healthz still asks the socket (``answers``).
        """
        await self._serve()

    async def answers(self, timeout: float) -> str | None:
        """None when the server answers GetDevicePluginOptions within ``timeout``, else why not."""
        if self._server is None:
            return "not started"
        try:
            async with grpc.aio.insecure_channel(f"unix://{self.socket_path}") as channel:
                stub = pb_grpc.DevicePluginStub(channel)
                await stub.GetDevicePluginOptions(pb.Empty(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            return f"does not answer on {self.socket_path}: {exc.code().name}"
        return None

    async def stop(self, grace: float = 0.5) -> None:
        """End streams cleanly, stop serving, and remove our socket (only ours)."""
        self.servicer.close()
        await self._stop_serving(grace)
