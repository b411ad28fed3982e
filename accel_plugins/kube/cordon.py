"""The Node annotation ``accel-plugins.io/cordon``, followed through the API server.

For an operator without a shell on the node: ``kubectl annotate node N
accel-plugins.io/cordon='gpu-0=fan failing'`` cordons as ``accel-plugins cordon``
does (:mod:`accel_plugins.runtime.cordon`), in both modes. A watch on this one
Node (a ``metadata.name`` field selector; ``nodes list`` and ``watch`` in the
chart's role) hands each version's annotation to the node's
:class:`~accel_plugins.runtime.cordon.Cordons`; a failed or ended watch is
started again after a backoff, the cordons known meanwhile staying in force.
Needs lightkube (the ``[dra]`` extra) and ``--node-name``; without them it
logs one line and the file alone cordons.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from accel_plugins.kube.access import optional_client
from accel_plugins.runtime.backoff import jittered
from accel_plugins.runtime.cordon import ANNOTATION, Cordons

if TYPE_CHECKING:
    from lightkube import AsyncClient

log = logging.getLogger(__name__)

BACKOFF_START = 0.5
BACKOFF_MAX = 30.0


async def follow_annotation(client: AsyncClient, node: str, cordons: Cordons) -> None:
    """Until cancelled: every version of Node ``node`` sets the annotation's cordons."""
    from lightkube.resources.core_v1 import Node

    delay = BACKOFF_START
    failing = False  # one WARNING per outage, not one per retry (seen on a real node)
    while True:
        try:
            async for kind, item in client.watch(Node, fields={"metadata.name": node}):
                if failing:
                    log.info("watching Node %s for %s again", node, ANNOTATION)
                delay, failing = BACKOFF_START, False
                annotations = (item.metadata.annotations if item.metadata else None) or {}
                cordons.set_annotation(None if kind == "DELETED" else annotations.get(ANNOTATION))
            log.info("Node watch for %s ended; watching again", node)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A refusal (RBAC), a dropped connection, 410 Gone: watch again, later.
            level = logging.DEBUG if failing else logging.WARNING
            log.log(level, "watching Node %s for %s failed (will retry): %s", node, ANNOTATION, exc)
            failing = True
            await asyncio.sleep(jittered(delay))
            delay = min(delay * 2, BACKOFF_MAX)


@contextlib.asynccontextmanager
async def node_cordons(
    cordons: Cordons,
    node: str,
    *,
    kubeconfig: str | None = None,
    client: AsyncClient | None = None,
) -> AsyncIterator[None]:
    """Follow the annotation while the context lasts (``client`` when given, else one
    made from ``kubeconfig`` or the service account and closed at the end)."""
    own = client is None
    if own or not node:  # without a node name nothing is made: one line says so
        client = optional_client(f"{ANNOTATION} annotation watch", node, kubeconfig, log)
    if client is None:
        yield
        return
    task = asyncio.create_task(follow_annotation(client, node, cordons), name="node cordons")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if own:
            await client.close()
