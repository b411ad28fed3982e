"""Device taints for Unhealthy devices, against a real kube-apiserver with and without the gate.

KEP-5055 (DRADeviceTaints): alpha and off by default in 1.34, where the API
server silently drops ``devices[].taints`` from what it stores
(kubernetes/kubernetes pkg/registry/resource/resourceslice/strategy.go,
``dropDisabledFields``); so ``auto`` taints only where the field is kept.
"""

from __future__ import annotations

import logging
import time

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceSlice
from prometheus_client import CollectorRegistry

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.dra.kube import KubeSlicePublisher
from accel_plugins.plugin.device import Device, DeviceTree, Health, tree
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from tests.e2e.test_dra_kube_slices import slices
from tests.fixtures.dra_kube import V1_34, V1_34_TAINTS, NodeClient, ServerOf

DRIVER = "taints.example.com"
TAINT_BOUND = 2.0  # the bound for a taint to show in the slice (and clear)
XID = HealthReason(ReasonKind.XID, "GPU has fallen off the bus", code=79)
pytestmark = pytest.mark.timeout(120)


GATE_ON = pytest.param(V1_34_TAINTS, id="gate-on")
GATE_OFF = pytest.param(V1_34, id="gate-off")


@pytest.fixture
def kube_apiserver(request: pytest.FixtureRequest, apiservers: ServerOf) -> ApiServer:
    """The API server each test names (parametrized indirectly)."""
    return apiservers(request.param)


def units(count: int, sick: dict[int, HealthReason | None] | None = None) -> DeviceTree:
    sick = sick or {}
    return tree(
        {
            "example.com/unit": [
                Device(id=f"unit{i:03d}").with_health(Health.UNHEALTHY, sick[i])
                if i in sick
                else Device(id=f"unit{i:03d}")
                for i in range(count)
            ]
        }
    )


def taints_of(found: list[ResourceSlice]) -> dict[str, list[tuple[str, str | None, str]]]:
    return {
        d.name: [(t.key, t.value, t.effect) for t in d.taints or []]
        for s in found
        for d in s.spec.devices or []
        if d.taints
    }


@pytest.mark.parametrize("kube_apiserver", [GATE_ON, GATE_OFF], indirect=True)
async def test_unhealthy_device_is_tainted_within_2s_and_cleared_on_recovery(
    kube: AsyncClient,
    kube_node: str,
    node_client: NodeClient,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate_on = "gate-on" in request.node.callspec.id
    pub = KubeSlicePublisher(
        node_client(kube_node), driver=DRIVER, node=kube_node, registry=CollectorRegistry()
    )
    with caplog.at_level(logging.INFO, logger="accel_plugins.dra.kube.gates"):
        await pub.publish(units(3))
        await pub.wait_in_sync()
    decisions = [r.getMessage() for r in caplog.records if "device taints" in r.getMessage()]
    assert len(decisions) == 1
    assert pub.taints is gate_on
    if not gate_on:
        assert "DRADeviceTaints" in decisions[0]

    start = time.perf_counter()
    await pub.publish(units(3, {1: XID}))
    await pub.wait_in_sync()
    found = await slices(kube, kube_node, DRIVER)
    took = time.perf_counter() - start
    if gate_on:
        assert taints_of(found) == {
            "unit001": [(f"{DRIVER}/unhealthy", "xid-79-GPU-has-fallen-off-the-bus", "NoSchedule")]
        }
        (tainted,) = [d for d in found[0].spec.devices or [] if d.taints]
        assert tainted.taints is not None
        assert tainted.taints[0].timeAdded is not None  # stamped by the API server
        assert took < TAINT_BOUND
    else:
        assert taints_of(found) == {}
        assert [d.name for d in found[0].spec.devices or []] == ["unit000", "unit002"]

    await pub.publish(units(3))  # healthy again
    await pub.wait_in_sync()
    found = await slices(kube, kube_node, DRIVER)
    assert taints_of(found) == {}
    assert [d.name for d in found[0].spec.devices or []] == ["unit000", "unit001", "unit002"]
    await pub.close()


@pytest.mark.parametrize("kube_apiserver", [GATE_ON], indirect=True)
async def test_a_slice_with_a_tainted_device_holds_at_most_64(
    kube: AsyncClient, kube_node: str, node_client: NodeClient
) -> None:
    """The API server refuses more than 64 devices in a slice with a taint (types.go,
    ResourceSliceMaxDevicesWithTaintsOrConsumesCounters); the builder splits them."""
    pub = KubeSlicePublisher(
        node_client(kube_node), driver=DRIVER, node=kube_node, registry=CollectorRegistry()
    )
    await pub.publish(units(200, {10: None}))
    await pub.wait_in_sync()
    found = await slices(kube, kube_node, DRIVER)
    assert [len(s.spec.devices or []) for s in found] == [64, 128, 8]
    assert taints_of(found) == {"unit010": [(f"{DRIVER}/unhealthy", "unknown", "NoSchedule")]}
    await pub.close()


@pytest.mark.parametrize("kube_apiserver", [GATE_OFF], indirect=True)
async def test_on_where_the_server_drops_taints_falls_back_to_leaving_out(
    kube: AsyncClient, kube_node: str, node_client: NodeClient, caplog: pytest.LogCaptureFixture
) -> None:
    pub = KubeSlicePublisher(
        node_client(kube_node),
        driver=DRIVER,
        node=kube_node,
        registry=CollectorRegistry(),
        taints="on",
    )
    await pub.publish(units(3, {0: XID}))
    await pub.wait_in_sync()
    assert pub.taints is False
    assert any("drops them" in r.getMessage() for r in caplog.records)
    (only,) = await slices(kube, kube_node, DRIVER)
    assert [d.name for d in only.spec.devices or []] == ["unit001", "unit002"]
    await pub.close()
