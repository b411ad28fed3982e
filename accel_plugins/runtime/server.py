"""One gRPC server on one unix socket: what every socket of ours shares, in both modes.

:class:`SocketServer` owns the path length check, the stale file removed first,
mode 0600 and removing only the socket it created. The device plugin's
``PluginServer``, the plugin watcher's ``RegistrationServer`` and the DRA driver's
service each put their own gRPC services on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import grpc

from accel_plugins.errors import AccelPluginsError

log = logging.getLogger(__name__)

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH = 107


class ServeError(AccelPluginsError):
    """The plugin's own socket could not be served."""


def socket_name(resource: str, prefix: str = "") -> str:
    """`nvidia.com/gpu` -> `nvidia.com_gpu.sock`: one readable file per resource.

    Unique because a resource name's domain is a DNS subdomain, which has no
    `_`: the first `_` is always the `/`. It differs from the names other plugins
    use in the same directory (NVIDIA's `nvidia-gpu.sock`, squat's
    `generic-device-plugin-<base64>-<time>.sock`), so running beside one while
    migrating never replaces its socket.
    """
    return f"{prefix}{resource.replace('/', '_', 1)}.sock"


class SocketServer:
    """A grpc.aio server on ``socket_path`` (mode 0600) until stopped.

    ``add_services`` puts the servicers on a new server; ``directory_flag``
    names the flag that chose the directory, for the path-too-long error.
    """

    def __init__(
        self,
        socket_path: Path,
        add_services: Callable[[grpc.aio.Server], None],
        *,
        directory_flag: str,
    ) -> None:
        if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
            raise ServeError(
                f"socket path {socket_path} is longer than the {MAX_SOCKET_PATH} bytes "
                f"a unix socket address can hold; use a shorter {directory_flag}"
            )
        self.socket_path = socket_path
        self._add_services = add_services
        self._server: grpc.aio.Server | None = None
        self._inode: int | None = None

    async def _serve(self) -> None:
        """Remove a stale socket of our name and serve; ServeError when that fails."""
        try:
            self.socket_path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:  # a directory in the way, say: not ours to remove
            raise ServeError(
                f"cannot remove {self.socket_path} to serve there: {exc.strerror}"
            ) from exc
        server = grpc.aio.server()
        self._add_services(server)
        if server.add_insecure_port(f"unix:{self.socket_path}") == 0:
            raise ServeError(f"cannot listen on {self.socket_path}")
        self._server = server  # before awaiting: a cancelled start is still stopped
        await server.start()
        try:
            # Only the kubelet (root) has any business on this socket.
            os.chmod(self.socket_path, 0o600)
            self._inode = self.socket_path.stat().st_ino
        except FileNotFoundError:
            # A starting kubelet wipes the directory; this must not crash the plugin.
            await self._stop_serving(0)
            raise ServeError(
                f"{self.socket_path} was removed while it was being served (kubelet restart?)"
            ) from None

    def socket_alive(self) -> bool:
        """True while the socket file we created is still in place (not removed or replaced)."""
        try:
            return self._inode is not None and self.socket_path.stat().st_ino == self._inode
        except FileNotFoundError:
            return False

    async def _stop_serving(self, grace: float) -> None:
        """Stop serving and remove our socket (only ours)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        if self.socket_alive():
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        self._inode = None
