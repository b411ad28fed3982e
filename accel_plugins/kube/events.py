"""Node Events through the API server (lightkube, the ``[dra]`` extra), in both modes.

The Event has the shape client-go's event recorder gives the kubelet's own
(staging/src/k8s.io/client-go/tools/record/event.go, makeEvent): a core/v1
Event named ``<node>.<nanoseconds in hex>`` in namespace ``default`` (a Node
has none), count 1, first and last timestamp now, the reporting component
and instance set. Its involvedObject is the Node with its UID, read once
(``nodes get``), so ``kubectl describe node`` lists it. Posting needs
``events create`` (the chart grants ``patch`` with it, as the kubelet's own
role has both).

:func:`start_node_events` wires it to a
:class:`~accel_plugins.runtime.health_changes.HealthWatch`; without a node
name, without lightkube or without a usable client config it logs one line
and the plugin runs on without Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from accel_plugins.kube.access import optional_client
from accel_plugins.runtime.health_changes import HealthWatch
from accel_plugins.runtime.node_events import DEFAULT_PER_MINUTE, NodeEvent, NodeEventSink

if TYPE_CHECKING:
    from lightkube import AsyncClient

log = logging.getLogger(__name__)

COMPONENT = "accel-plugins"
EVENT_NAMESPACE = "default"


class KubeEventPoster:
    """Creates core/v1 Events about Node ``node`` with ``client``."""

    def __init__(self, client: AsyncClient, node: str) -> None:
        self._client = client
        self._node = node
        self._uid: str | None = None

    async def _node_uid(self) -> str:
        if self._uid is None:
            from lightkube.resources.core_v1 import Node

            found = await self._client.get(Node, self._node)
            self._uid = (found.metadata.uid if found.metadata else None) or ""
        return self._uid

    async def post(self, event: NodeEvent) -> None:
        from lightkube.models.core_v1 import EventSource, ObjectReference
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Event

        now = datetime.datetime.now(datetime.UTC)
        await self._client.create(
            Event(
                metadata=ObjectMeta(
                    name=f"{self._node}.{time.time_ns():x}", namespace=EVENT_NAMESPACE
                ),
                involvedObject=ObjectReference(
                    apiVersion="v1", kind="Node", name=self._node, uid=await self._node_uid()
                ),
                reason=event.reason,
                message=event.message,
                type=event.type,
                count=1,
                firstTimestamp=now,
                lastTimestamp=now,
                source=EventSource(component=COMPONENT, host=self._node),
                reportingComponent=COMPONENT,
                reportingInstance=self._node,
            )
        )


@contextlib.asynccontextmanager
async def node_events(
    watch: HealthWatch,
    node: str,
    *,
    kubeconfig: str | None = None,
    client: AsyncClient | None = None,
    per_minute: int = DEFAULT_PER_MINUTE,
) -> AsyncIterator[NodeEventSink | None]:
    """Post ``watch``'s changes as Events on ``node`` while the context lasts.

    ``client`` is used when given (DRA mode has one), else one is made from
    ``kubeconfig`` or the pod's service account and closed at the end. Yields
    the sink, or None (after one log line) when Events cannot be posted.
    """
    own = client is None
    if own or not node:  # without a node name nothing is made: one line says so
        client = optional_client("Node Events for device health", node, kubeconfig, log)
    if client is None:
        yield None
        return
    sink = NodeEventSink(KubeEventPoster(client, node), per_minute=per_minute)
    watch.add_sink(sink)
    task = asyncio.create_task(sink.run(), name="node events")
    try:
        yield sink
    finally:
        watch.remove_sink(sink)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if own:
            await client.close()
