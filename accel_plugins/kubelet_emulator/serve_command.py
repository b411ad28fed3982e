"""``accel-plugins kubelet``: the emulator run as a process until it is cancelled.

The command line builds no :class:`Kubelet` itself; it calls :func:`serve` with the
directories it was given, a sink that prints each event, and optionally a follow-up
(``--admit``) that runs once the emulator serves and may end the run with an exit code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from accel_plugins.kubelet_emulator.emulator import DEFAULT_SOCKET_NAME, EventSink, Kubelet


async def serve(
    plugin_dir: Path,
    *,
    pod_resources_socket: Path | None = None,
    on_event: EventSink | None = None,
    socket_name: str = DEFAULT_SOCKET_NAME,
    plugins_registry_dir: Path | None = None,
    then: Callable[[Kubelet], Awaitable[int | None]] | None = None,
) -> int | None:
    """Run the emulator until cancelled, reporting what happens through ``on_event``.

    ``then`` runs once the emulator serves (e.g. pod admission); when it returns
    a number the emulator stops and ``serve`` returns it.
    """
    async with Kubelet(
        plugin_dir,
        socket_name=socket_name,
        pod_resources_socket=pod_resources_socket,
        on_event=on_event,
        plugins_registry_dir=plugins_registry_dir,
    ) as kubelet:
        if then is not None:
            code = await then(kubelet)
            if code is not None:
                return code
        await asyncio.Future()
    return None  # pragma: no cover - the future never completes
