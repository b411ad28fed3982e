"""A backend served as a DRA driver in this process, wired as ``--kubelet-api dra`` wires it.

The same objects :func:`accel_plugins.dra.run.serve_dra` builds (a
:class:`~accel_plugins.dra.driver.DraDriver` over the backend, publishing through a
``KubeSlicePublisher`` that asks the running backend's capabilities for attributes,
names, taint keys, counters and shared units, reading claims with ``KubeClaimSource``),
without the process, its signal handlers and its metrics server. For tests that need a
backend built in ways the command line does not offer (a simulated NVIDIA node whose
sysfs is a fake tree), yet the slices our driver publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from accel_plugins.dra.capabilities import NONE, DraCapabilities, RunningCapabilities
from accel_plugins.dra.driver import DraDriver, DraSettings
from accel_plugins.plugin.backend import Backend

if TYPE_CHECKING:
    from lightkube import AsyncClient

READY_TIMEOUT = 20.0


@contextlib.asynccontextmanager
async def dra_driver(
    backend: Backend, *, driver: str, node: str, client: AsyncClient, root: Path
) -> AsyncIterator[DraDriver]:
    """``backend`` served as ``driver`` on ``node`` (``client`` acting as its kubelet),
    sockets under ``root`` (keep it short: unix socket paths are at most 107 bytes);
    stopped on exit, its slices left as the real driver leaves them."""
    from accel_plugins.dra import kube

    settings = DraSettings(
        driver_name=driver,
        node_name=node,
        kubelet_plugins_dir=root / driver / "plugins",
        plugins_registry_dir=root / driver / "registry",
        cdi_spec_dir=root / driver / "cdi",
    )
    serving: list[DraDriver] = []

    def current() -> DraCapabilities:
        return serving[0].capabilities if serving else NONE

    running = RunningCapabilities(current)
    apis = kube.ApiVersions(client, node=node)
    slices = kube.KubeSlicePublisher(
        client,
        driver=driver,
        node=node,
        describe=running.dra_device,
        namer=running,
        registry=CollectorRegistry(),
        keyer=running,
        api=apis,
        counters=running,
        sharer=running,
    )
    serving.append(DraDriver(lambda: backend, settings, kube.KubeClaimSource(client, apis), slices))
    dra = serving[0]
    task = asyncio.create_task(dra.run(), name=f"dra driver {driver}")
    try:
        ready = asyncio.ensure_future(dra.ready.wait())
        await asyncio.wait(
            {task, ready}, timeout=READY_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        ready.cancel()
        if task.done():
            task.result()  # surface the crash
        assert dra.ready.is_set(), f"{driver} did not serve within {READY_TIMEOUT:g}s"
        yield dra
    finally:
        dra.stop()
        await asyncio.wait_for(task, READY_TIMEOUT)
