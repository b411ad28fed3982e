"""The one thing the command line asks of a mode: serve a backend until told to stop."""

from __future__ import annotations

from typing import Protocol

from accel_plugins.plugin.command import BackendFactory


class Mode(Protocol):
    """A way to serve a backend to the kubelet: the device plugin or the DRA driver.

    Each mode is a value holding its settings (``DevicePluginMode``, ``DraMode``);
    ``serve`` runs until SIGTERM or SIGINT and returns the process's exit status.
    """

    async def serve(self, factory: BackendFactory) -> int: ...
