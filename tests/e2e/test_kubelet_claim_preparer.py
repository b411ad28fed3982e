"""ClaimPreparer, the emulator's DRA manager, against our DRA driver over real sockets.

The API server is replaced by a table of ResourceClaims on both sides (the
emulator's ClaimReader, the driver's ClaimSource); the real API server runs in
tests/e2e/test_kubelet_admit_claims.py. What is checked here is the DRA
manager's bookkeeping (pkg/kubelet/cm/dra/manager.go): a claim two pods share
is prepared once and unprepared with the last of them, every claim is checked
before any driver is called, and the kubelet's messages for each failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.claims import (
    AllocatedResult,
    ClaimInfo,
    ClaimPrepareError,
    ClaimPreparer,
)
from accel_plugins.kubelet_emulator.podspec import parse_pods
from accel_plugins.plugin.device import Device, DeviceNode, Health, tree
from tests.fixtures.dra_plugin import DRIVER, NODE, FakeClaims
from tests.fixtures.framework import ScriptedBackend


@dataclass
class TableReader:
    """The emulator's ClaimReader over a table, as the API server would answer."""

    claims: dict[str, ClaimInfo] = field(default_factory=dict)

    def add(self, name: str, uid: str, *devices: str, reserved: tuple[str, ...] = ()) -> None:
        results = tuple(AllocatedResult("accel", DRIVER, NODE, d) for d in devices)
        self.claims[name] = ClaimInfo("default", name, uid, bool(devices), results, reserved)

    async def get(self, namespace: str, name: str) -> ClaimInfo:
        if name not in self.claims:
            raise ClaimPrepareError(f"fetch ResourceClaim {name}: not found")
        return self.claims[name]

    async def close(self) -> None:
        pass


def pod(name: str, *claims: str) -> Any:
    refs = ", ".join(f"{{name: c{i}, resourceClaimName: {c}}}" for i, c in enumerate(claims))
    uses = ", ".join(f"{{name: c{i}}}" for i in range(len(claims)))
    text = (
        f"metadata: {{name: {name}}}\n"
        f"spec:\n  resourceClaims: [{refs}]\n"
        f"  containers: [{{name: main, resources: {{claims: [{uses}]}}}}]\n"
    )
    return parse_pods(text, f"{name}.yaml")[0]


@pytest.fixture
async def setup(
    watching_kubelet: Kubelet, registry_dir: Path, start_driver: Any
) -> tuple[ClaimPreparer, TableReader, FakeClaims, Any]:
    backend = ScriptedBackend(
        tree(
            {
                "example.com/card": [
                    Device(f"card{i}", health=Health.HEALTHY, nodes=(DeviceNode(f"/dev/card{i}"),))
                    for i in range(2)
                ]
            }
        )
    )
    source = FakeClaims()
    running = await start_driver(backend, source, plugins_registry_dir=registry_dir)
    reader = TableReader()
    preparer = ClaimPreparer(
        watching_kubelet,
        reader,
        cdi_spec_dirs=[running.settings.cdi_spec_dir],
        driver_timeout=5.0,
    )
    return preparer, reader, source, running


def claim(reader: TableReader, source: FakeClaims, name: str, uid: str, device: str) -> None:
    reader.add(name, uid, device)
    source.add(uid, ("accel", device), name=name)


async def test_a_shared_claim_is_prepared_once_and_unprepared_with_the_last_pod(
    setup: tuple[ClaimPreparer, TableReader, FakeClaims, Any],
) -> None:
    preparer, reader, source, running = setup
    claim(reader, source, "shared", "uid-1", "card0")
    first, second = pod("first", "shared"), pod("second", "shared")
    one = await preparer.prepare(first)
    two = await preparer.prepare(second)
    assert (one.error, two.error) == ("", "")
    expected = f"k8s.{DRIVER}/claim=uid-1-accel"
    assert one.containers[0].cdi_ids == (("c0", (expected,)),)
    assert two.containers[0].cdi_ids == one.containers[0].cdi_ids
    assert len(source.calls) == 1  # the second pod found it prepared
    spec = running.settings.cdi_spec_dir / f"k8s.{DRIVER}_claim_uid-1.json"
    edits = preparer.cdi_edits(expected)
    assert edits is not None
    assert edits.source == spec
    assert [n.split(" (")[0] for n in edits.device_nodes] == ["/dev/card0 -> /dev/card0"]

    assert await preparer.unprepare(first) == []
    assert spec.exists()  # the second pod still uses it
    assert await preparer.unprepare(second) == []
    assert not spec.exists()
    assert preparer.prepared_claims == []


@pytest.mark.parametrize(
    ("case", "message"),
    [
        pytest.param("missing", "fetch ResourceClaim absent: not found", id="claim-missing"),
        pytest.param("unallocated", "ResourceClaim waiting: not allocated", id="not-allocated"),
        pytest.param(
            "reserved",
            "pod p is not allowed to use ResourceClaim elsewhere (uid-r): reserved for other",
            id="reserved-for-another-pod",
        ),
        pytest.param(
            "driver-error",
            "NodePrepareResources failed for ResourceClaim broken: ",
            id="driver-fails-the-claim",
        ),
    ],
)
async def test_a_claim_that_fails_fails_the_pod_and_prepares_nothing_before(
    setup: tuple[ClaimPreparer, TableReader, FakeClaims, Any], case: str, message: str
) -> None:
    preparer, reader, source, _ = setup
    claim(reader, source, "good", "uid-g", "card0")
    names = {"missing": "absent", "unallocated": "waiting", "reserved": "elsewhere"}
    bad = names.get(case, "broken")
    if case == "unallocated":
        reader.add(bad, "uid-w")
    elif case == "reserved":
        reader.add(bad, "uid-r", "card1", reserved=("other",))
    elif case == "driver-error":
        reader.add(bad, "uid-b", "card9")  # allocated a device the driver does not have
        source.add("uid-b", ("accel", "card9"), name=bad)
    outcome = await preparer.prepare(pod("p", "good", bad))
    assert outcome.error.startswith(f"prepare dynamic resources: {message}"), outcome.error
    if case != "driver-error":
        assert source.calls == []  # checked before any driver was called
    # What a driver may hold is released when the pod goes, as the kubelet does.
    assert await preparer.unprepare(pod("p", "good", bad)) == []
    assert preparer.prepared_claims == []


async def test_a_driver_that_never_registers(
    watching_kubelet: Kubelet,
) -> None:
    reader = TableReader()
    reader.claims["c"] = ClaimInfo(
        "default", "c", "uid-c", True, (AllocatedResult("r", "absent.example.com", NODE, "d"),)
    )
    preparer = ClaimPreparer(watching_kubelet, reader, driver_timeout=0.2)
    outcome = await preparer.prepare(pod("p", "c"))
    assert outcome.error == (
        "prepare dynamic resources: DRA driver absent.example.com is not registered (waited 0.2s)"
    )
