"""The DRA side as the API server has it: our driver's ResourceSlices of this node.

A device plugin starting after a DRA driver that was killed (no SIGTERM, so no
withdrawal) must not publish while the scheduler still allocates from its slices;
the kubelet removes them in time, or an operator does. Read with the plugin's own
API access (the chart's switch mode runs both modes under the DRA ServiceAccount).
"""

from __future__ import annotations

from collections.abc import Sequence

from accel_plugins.switch.model import Blockers, HeldDevice
from accel_plugins.switch.wait import Side


class SliceSide:
    """ResourceSlices of ``driver`` on ``node`` that still list devices."""

    def __init__(self, node: str, driver: str, kubeconfig: str | None = None) -> None:
        self.node = node
        self.driver = driver
        self.kubeconfig = kubeconfig

    async def read(self) -> Blockers:
        from lightkube.resources.resource_v1 import ResourceSlice

        from accel_plugins.kube.client import load_config, make_client

        client = make_client(load_config(self.kubeconfig))
        try:
            mine = client.list(
                ResourceSlice, fields={"spec.nodeName": self.node, "spec.driver": self.driver}
            )
            names = [
                f"ResourceSlice {item.metadata.name}"
                async for item in mine
                if item.spec.devices and item.metadata is not None
            ]
        finally:
            await client.close()
        return Blockers(advertised=tuple(sorted(names)))


class AllSides:
    """Several reads of the other mode, merged: clear only when every one is."""

    def __init__(self, sides: Sequence[Side]) -> None:
        self.sides = tuple(sides)

    async def read(self) -> Blockers:
        held: list[HeldDevice] = []
        advertised: list[str] = []
        for side in self.sides:
            found = await side.read()
            held += found.held
            advertised += found.advertised
        return Blockers(held=tuple(held), advertised=tuple(advertised))
