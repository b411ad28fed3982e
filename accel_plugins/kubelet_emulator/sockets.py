"""The emulator's unix sockets: the gRPC servers it listens with, and clearing stale sockets.

The kubelet serves Registration on ``<plugin_dir>/kubelet.sock`` and, optionally,
PodResources on a socket of its own; both are owner-only (0600), as the real ones.
On start it deletes every other file in the plugin directory, which is how plugins
learn that the kubelet restarted: their endpoint vanishes and they register again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

import grpc

from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.api import podresources_v1_pb2_grpc as pr_grpc
from accel_plugins.kubelet_emulator.client import unix_target
from accel_plugins.kubelet_emulator.errors import KubeletError
from accel_plugins.kubelet_emulator.podresources import PodResourcesServicer
from accel_plugins.kubelet_emulator.registration import RegisterHandler, RegistrationServicer

log = logging.getLogger(__name__)


def remove_stale_contents(directory: Path, keep: set[Path]) -> list[Path]:
    """Delete every non-directory entry of ``directory`` except ``keep``.

    The real kubelet does this on start: plugins watching their socket see it
    vanish and re-register with the new kubelet.
    """
    removed = []
    for entry in sorted(directory.iterdir()):
        if entry in keep:
            continue
        try:
            if stat.S_ISDIR(entry.stat().st_mode):
                continue
            entry.unlink()
            removed.append(entry)
        except FileNotFoundError:
            continue
        except OSError as e:
            log.error("cannot remove stale %s: %s", entry, e)
    return removed


class SocketServers:
    """The gRPC servers the emulator runs, one per unix socket, stopped together."""

    def __init__(self) -> None:
        self._servers: list[grpc.aio.Server] = []

    async def serve_registration(self, handler: RegisterHandler, socket: Path) -> None:
        """Serve the Registration service (device plugins register here) on ``socket``."""
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(RegistrationServicer(handler), server)
        await self._serve(server, socket)

    async def serve_pod_resources(self, servicer: PodResourcesServicer, socket: Path) -> None:
        """Serve PodResources v1 on ``socket``, replacing a socket a previous run left."""
        socket.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if not socket.is_dir():
                socket.unlink()
        server = grpc.aio.server()
        pr_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
        await self._serve(server, socket)

    async def _serve(self, server: grpc.aio.Server, socket: Path) -> None:
        try:
            server.add_insecure_port(unix_target(socket))
        except RuntimeError as e:
            raise KubeletError(f"cannot listen on {socket}: {e}") from None
        await server.start()
        self._servers.append(server)
        os.chmod(socket, 0o600)

    async def stop(self) -> bool:
        """Stop every server; whether any was running."""
        servers, self._servers = self._servers, []
        for server in servers:
            await server.stop(None)
        return bool(servers)
