"""One ListAndWatch client per registered resource.

An ``Endpoint`` owns the ``PluginClient`` of one registration and a task that
reads the plugin's ListAndWatch stream, handing each device list and finally
the end of the stream to the kubelet through two callbacks. A stopped
endpoint (replaced by a re-registration, or the kubelet stopping) reports
nothing more: only a plugin-side end counts as "stream ended".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from accel_plugins.kubelet_emulator.client import PluginClient
from accel_plugins.kubelet_emulator.errors import KubeletError
from accel_plugins.kubelet_emulator.model import DeviceState, PluginOptions

log = logging.getLogger(__name__)

DevicesCallback = Callable[["Endpoint", Sequence[DeviceState]], None]
EndCallback = Callable[["Endpoint", KubeletError | None], None]


class Endpoint:
    """The kubelet's connection to one plugin serving one resource."""

    def __init__(
        self,
        resource: str,
        client: PluginClient,
        options: PluginOptions,
        *,
        on_devices: DevicesCallback,
        on_end: EndCallback,
    ) -> None:
        self.resource = resource
        self.client = client
        self.options = options
        self._on_devices = on_devices
        self._on_end = on_end
        self._task: asyncio.Task[None] | None = None
        self.stopped = False

    @property
    def socket_path(self) -> str:
        return str(self.client.socket_path)

    def start(self) -> None:
        """Open the ListAndWatch stream in a background task."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"ListAndWatch {self.resource}")

    async def _run(self) -> None:
        error: KubeletError | None = None
        try:
            async for devices in self.client.list_and_watch():
                self._on_devices(self, devices)
        except KubeletError as e:
            error = e
        if not self.stopped:
            log.info("ListAndWatch for %s ended: %s", self.resource, error or "closed by plugin")
            self._on_end(self, error)

    async def stop(self) -> None:
        """Cancel the stream and close the channel; idempotent."""
        self.stopped = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.client.close()
