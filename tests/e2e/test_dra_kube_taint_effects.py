"""Taint effects by reason against real API servers: None where it is taken, else NoSchedule.

Effect ``None`` (KEP-5055, informational: the scheduler ignores it) "is only valid for
Kubernetes >= 1.35" (kubernetes/enhancements keps/sig-scheduling/5055-dra-device-taints-
and-tolerations/README.md). Measured with ../shared/k8s's binaries: v1.36.2 keeps it; v1.34.9
with DRADeviceTaints on refuses it (422, ``spec.devices[0].taints[0].effect: Unsupported
value: "None": supported values: "NoExecute", "NoSchedule"``), and with the gate off drops
it with every other taint. So informational reasons (``unmonitored``, an application-error
XID) are published with ``None`` on 1.36 and with ``NoSchedule`` on 1.34, and the other
reasons with ``NoSchedule`` on both.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import AsyncClient
from prometheus_client import CollectorRegistry

from accel_plugins.backends.nvidia.xid import xid_reason
from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.dra.kube import KubeSlicePublisher
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from tests.e2e.test_dra_kube_slices import slices
from tests.e2e.test_dra_kube_taints import XID, taints_of, units
from tests.fixtures.dra_kube import V1_34_TAINTS, V1_36, NodeClient, ServerOf

DRIVER = "effects.example.com"
KEY = f"{DRIVER}/unhealthy"
UNMONITORED = HealthReason(ReasonKind.UNMONITORED, "health events failed")
SICK: dict[int, HealthReason | None] = {0: UNMONITORED, 1: XID, 2: xid_reason(13)}
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kube_apiserver(request: pytest.FixtureRequest, apiservers: ServerOf) -> ApiServer:
    """The API server each test names (parametrized indirectly)."""
    return apiservers(request.param)


def expected(effect_of_informational: str) -> dict[str, list[tuple[str, str | None, str]]]:
    return {
        "unit000": [(KEY, "unmonitored-health-events-failed", effect_of_informational)],
        "unit001": [(KEY, "xid-79-GPU-has-fallen-off-the-bus", "NoSchedule")],
        "unit002": [(KEY, "xid-13-Graphics-Engine-Exception", effect_of_informational)],
    }


@pytest.mark.parametrize(
    ("kube_apiserver", "mode", "informational", "probes"),
    [
        pytest.param(V1_36, "auto", "None", 1, id="1.36-auto"),
        pytest.param(V1_36, "on", "None", 1, id="1.36-on"),
        pytest.param(V1_34_TAINTS, "auto", "NoSchedule", 2, id="1.34-auto-falls-back"),
        pytest.param(V1_34_TAINTS, "on", "NoSchedule", 1, id="1.34-on-falls-back"),
    ],
    indirect=["kube_apiserver"],
)
async def test_informational_reasons_get_effect_none_where_the_server_takes_it(
    kube: AsyncClient,
    kube_node: str,
    node_client: NodeClient,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    informational: str,
    probes: int,
) -> None:
    client = node_client(kube_node)
    sent: list[bool] = []
    create = client.create

    async def counted(*args: Any, **kwargs: Any) -> Any:
        sent.append(bool(kwargs.get("dry_run")))
        return await create(*args, **kwargs)

    setattr(client, "create", counted)  # noqa: B010 (counts the dry-runs)
    registry = CollectorRegistry()
    pub = KubeSlicePublisher(client, driver=DRIVER, node=kube_node, registry=registry, taints=mode)
    with caplog.at_level(logging.INFO, logger="accel_plugins.dra.kube.gates"):
        await pub.publish(units(4, SICK))
        await pub.wait_in_sync()
    assert sent.count(True) == probes  # the NoSchedule dry-run only where None is refused
    (decision,) = [r.getMessage() for r in caplog.records if "device taints" in r.getMessage()]
    assert ("effect None for informational" in decision) is (informational == "None")
    assert ("refuses effect None" in decision) is (informational != "None")
    assert pub.taints is True
    # The write was taken at once, not refused and retried.
    assert registry.get_sample_value("accel_plugins_dra_slice_publish_failures_total") == 0

    found = await slices(kube, kube_node, DRIVER)
    assert taints_of(found) == expected(informational)
    assert [d.name for d in found[0].spec.devices or []] == [f"unit{i:03d}" for i in range(4)]

    await pub.publish(units(4))  # healthy again
    await pub.wait_in_sync()
    assert taints_of(await slices(kube, kube_node, DRIVER)) == {}
    await pub.close()
