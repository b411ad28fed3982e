"""Registration sockets for the kubelet's plugin watcher (pluginregistration v1), in both modes.

The kubelet's plugin watcher notices a socket in its ``plugins_registry`` directory
(inotify), calls GetInfo, dials the endpoint it is given and reports the outcome with
NotifyRegistrationStatus. A device plugin answers with type ``DevicePlugin``
(:mod:`accel_plugins.deviceplugin.watched_plugin`), a DRA driver with ``DRAPlugin``
(:mod:`accel_plugins.dra.registration_socket`); the socket and the exchange are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc

from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.api import pluginregistration_v1_pb2_grpc as reg_grpc
from accel_plugins.runtime.server import SocketServer

# (registered, error) as the kubelet sent them.
StatusCallback = Callable[[bool, str], None]


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """What the kubelet's plugin watcher asks a registration socket; ``info`` is the mode's."""

    def __init__(self, resource: str, endpoint: str, on_status: StatusCallback) -> None:
        self.resource = resource
        self.endpoint = endpoint
        self._on_status = on_status

    def info(self) -> reg.PluginInfo:
        """What GetInfo answers: the plugin's type, name, endpoint and versions."""
        raise NotImplementedError

    async def GetInfo(
        self,
        request: reg.InfoRequest,
        context: grpc.aio.ServicerContext[reg.InfoRequest, reg.PluginInfo],
    ) -> reg.PluginInfo:
        return self.info()

    async def NotifyRegistrationStatus(
        self,
        request: reg.RegistrationStatus,
        context: grpc.aio.ServicerContext[reg.RegistrationStatus, reg.RegistrationStatusResponse],
    ) -> reg.RegistrationStatusResponse:
        self._on_status(request.plugin_registered, request.error)
        return reg.RegistrationStatusResponse()


class RegistrationServer(SocketServer):
    """Serves one RegistrationServicer on ``socket_path`` (mode 0600) until stopped.

    A stale socket of that name is removed first; only the socket this server
    created (same inode) is removed on stop.
    """

    def __init__(self, servicer: RegistrationServicer, socket_path: Path) -> None:
        super().__init__(
            socket_path,
            lambda server: reg_grpc.add_RegistrationServicer_to_server(servicer, server),
            directory_flag="--plugins-registry-dir",
        )
        self.servicer = servicer

    async def start(self) -> None:
        await self._serve()

    async def stop(self) -> None:
        await self._stop_serving(0)
