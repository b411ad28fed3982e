"""A DRA driver stopping because its node was switched to the device plugin.

The chart's per-node switch (``kubeletApiSwitch``) moves a node by its label; the
driver told to stop reads the label, and only when it no longer names DRA (a switch,
not an upgrade) deletes the node's slices of its driver, so the device plugin, which
waits for them to go (accel_plugins.switch), never serves a device DRA still offers.
"""

from __future__ import annotations

import logging
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from accel_plugins.dra.driver import DraSettings
from accel_plugins.dra.kube.api import ApiVersions
from accel_plugins.switch.model import SwitchSettings

log = logging.getLogger("accel_plugins.dra.run")


async def withdraw_on_switch(
    client: AsyncClient, apis: ApiVersions, settings: DraSettings, switch: SwitchSettings
) -> None:
    """Stopped: if the node's label no longer names DRA, this is a switch, so delete the
    node's slices of this driver before the device plugin starts (it waits for them)."""
    try:
        node = await client.get(Node, settings.node_name)
        labels = dict(node.metadata.labels or {}) if node.metadata is not None else {}
        if not switch.switching_away(labels, "dra"):
            log.info("stopped; node %s still runs DRA: slices kept", settings.node_name)
            return
        api = await apis.get()
        fields: dict[str, Any] = {
            "spec.nodeName": settings.node_name,
            "spec.driver": settings.driver_name,
        }
        found: Any = client.list(api.slice_type, fields=fields)
        names = [s.metadata.name async for s in found]
        for name in names:
            await client.delete(api.slice_type, name)
        log.info(
            "kubelet-api switch: node %s leaves DRA: deleted %d ResourceSlice(s) of %s",
            settings.node_name,
            len(names),
            settings.driver_name,
        )
    except Exception as exc:  # log once at the edge; the kubelet wipes them too
        log.warning("kubelet-api switch: could not withdraw the ResourceSlices: %s", exc)
