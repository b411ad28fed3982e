"""Whether this node's kubelet serves the pods of a rolling update side by side.

The kubelet accepts several registrations of one DRA driver since 1.33
(the kubeletplugin library's ``RollingUpdate`` needs it); an older one keeps one
per driver, so there the pods take turns on the fixed socket names. The version is
the Node's ``status.nodeInfo.kubeletVersion``, read once at start.
"""

from __future__ import annotations

import dataclasses
import logging
import re

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node

from accel_plugins.dra.driver import DraSettings

log = logging.getLogger("accel_plugins.dra.run")

SIDE_BY_SIDE_SINCE = (1, 33)
_VERSION = re.compile(r"v?(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int] | None:
    """``v1.34.9`` -> (1, 34); None when it is not a version."""
    found = _VERSION.match(text.strip())
    return (int(found[1]), int(found[2])) if found else None


async def kubelet_version(client: AsyncClient, node: str) -> tuple[int, int] | None:
    """The node's kubelet version (major, minor); None when the Node does not say."""
    try:
        obj = await client.get(Node, node)
    except (ApiError, httpx2.TransportError) as exc:
        log.warning("cannot read Node %s for its kubelet version: %s", node, exc)
        return None
    info = obj.status.nodeInfo if obj.status is not None else None
    return parse_version(info.kubeletVersion) if info is not None else None


async def rolling_settings(client: AsyncClient, settings: DraSettings, mode: str) -> DraSettings:
    """``settings`` with the pod UID kept only where pods may serve side by side:
    ``mode`` is ``--dra-rolling-update`` (auto asks the Node; on and off are kept)."""
    if mode != "auto" or not settings.instance_uid:
        return settings
    version = await kubelet_version(client, settings.node_name)
    if version is not None and version >= SIDE_BY_SIDE_SINCE:
        log.info("kubelet %d.%d: this pod's sockets are named after its UID", *version)
        return settings
    said = "unknown" if version is None else f"{version[0]}.{version[1]}"
    log.info(
        "kubelet %s (side-by-side pods need %d.%d): the fixed socket names, one pod at a time",
        said,
        *SIDE_BY_SIDE_SINCE,
    )
    return dataclasses.replace(settings, instance_uid="")
