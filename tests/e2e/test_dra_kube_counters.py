"""Shared counters (partitionable devices, KEP-4815) against a real kube-apiserver.

No backend of ours declares shared counters yet, so a small one here does: two
cards of 8 memory slices each, every card offered whole and as two halves, each
using its card's counters. The 1.35 rules (kubernetes/kubernetes
pkg/apis/resource/types.go and validation.go): a slice holds devices or
``sharedCounters``, never both; at most 8 counter sets per slice; at most 64
devices in a slice with a device that consumes counters. 1.36 keeps the fields
(DRAPartitionableDevices beta); 1.34 drops them (alpha, off): then the devices
that use counters are left out rather than offered without a limit.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from prometheus_client import CollectorRegistry

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.dra.kube import KubeSlicePublisher
from accel_plugins.plugin.device import Device, DeviceTree, tree
from accel_plugins.plugin.dra_attributes import DraDeviceInfo
from tests.e2e.test_dra_kube_slices import slices
from tests.fixtures.dra_kube import V1_34, V1_36, NodeClient, ServerOf

DRIVER = "cards.example.com"
pytestmark = pytest.mark.timeout(120)


class PartitionedCards:
    """A backend whose cards are offered whole and in halves, sharing each card's memory."""

    def __init__(self, cards: int) -> None:
        self.cards = cards

    def scan(self) -> DeviceTree:
        return tree(
            {
                "example.com/card": [Device(id=f"card{c}") for c in range(self.cards)],
                "example.com/half": [
                    Device(id=f"card{c}-half{h}") for c in range(self.cards) for h in range(2)
                ],
            }
        )

    def dra_counter_sets(self) -> Mapping[str, Mapping[str, int]]:
        return {f"card{c}": {"memory": 8} for c in range(self.cards)}

    def dra_device(self, resource: str, device: Device) -> DraDeviceInfo:
        card = device.id.split("-")[0]
        used = 8 if resource == "example.com/card" else 4
        return DraDeviceInfo(consumes={card: {"memory": used}})


@pytest.fixture
def kube_apiserver(request: pytest.FixtureRequest, apiservers: ServerOf) -> ApiServer:
    return apiservers(request.param)


@pytest.mark.parametrize(
    ("cards", "layout"),
    [
        pytest.param(2, [("devices", 6), ("sets", 2)], id="two-cards"),
        # 30 devices in one slice; 10 sets: 8 in one slice, 2 in the next.
        pytest.param(10, [("devices", 30), ("sets", 8), ("sets", 2)], id="ten-cards"),
        # 66 devices: 64 in a slice (they use counters), then 2.
        pytest.param(
            22,
            [("devices", 64), ("devices", 2), ("sets", 8), ("sets", 8), ("sets", 6)],
            id="twenty-two-cards",
        ),
    ],
)
@pytest.mark.parametrize("kube_apiserver", [pytest.param(V1_36, id="v1.36")], indirect=True)
async def test_counter_sets_get_slices_of_their_own(
    kube: AsyncClient,
    kube_node: str,
    node_client: NodeClient,
    cards: int,
    layout: list[tuple[str, int]],
) -> None:
    backend = PartitionedCards(cards)
    pub = KubeSlicePublisher(
        node_client(kube_node),
        driver=DRIVER,
        node=kube_node,
        registry=CollectorRegistry(),
        describe=backend.dra_device,
        counters=backend,
    )
    await pub.publish(backend.scan())
    await pub.wait_in_sync()
    assert pub.in_sync
    found = await slices(kube, kube_node, DRIVER)
    seen = [
        ("sets", len(s.spec.sharedCounters))
        if s.spec.sharedCounters
        else ("devices", len(s.spec.devices or []))
        for s in found
    ]
    assert seen == layout
    assert all(not (s.spec.sharedCounters and s.spec.devices) for s in found)
    assert {s.spec.pool.resourceSliceCount for s in found} == {len(layout)}
    half = next(d for s in found for d in s.spec.devices or [] if d.name == "card0-half1")
    (used,) = half.consumesCounters or []
    assert (used.counterSet, used.counters) == ("card0", {"memory": {"value": "4"}})
    await pub.close()


@pytest.mark.parametrize("kube_apiserver", [pytest.param(V1_34, id="v1.34")], indirect=True)
async def test_where_counters_are_dropped_the_devices_using_them_are_left_out(
    kube: AsyncClient,
    kube_node: str,
    node_client: NodeClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = PartitionedCards(2)
    pub = KubeSlicePublisher(
        node_client(kube_node),
        driver=DRIVER,
        node=kube_node,
        registry=CollectorRegistry(),
        describe=backend.dra_device,
        counters=backend,
    )
    await pub.publish(backend.scan())
    await pub.wait_in_sync()
    assert pub.in_sync
    assert any("DRAPartitionableDevices" in r.getMessage() for r in caplog.records)
    found = await slices(kube, kube_node, DRIVER)
    assert [len(s.spec.devices or []) for s in found] == [0]
    assert not any(s.spec.sharedCounters for s in found)
    await pub.close()
