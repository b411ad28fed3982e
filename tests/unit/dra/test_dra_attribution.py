"""DRA mode's /metrics attribution: a device's holders are its prepared claims' pods."""

from __future__ import annotations

from pathlib import Path

import pytest

from accel_plugins.dra.attribution import ClaimAttribution
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim
from accel_plugins.dra.model import device_names
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.plugin.backend import PodRef
from accel_plugins.plugin.device import Device, DeviceNode, tree
from tests.fixtures.dra_plugin import DRIVER, NODE, FakeClaims

CARD = "example.com/card"
LINK = "example.com/link"
DEVICES = tree(
    {
        CARD: [Device(f"card{i}", nodes=(DeviceNode(f"/dev/card{i}"),)) for i in range(3)],
        LINK: [Device("link0", envs={"LINK": "0"})],
    }
)


def make_preparer(tmp_path: Path, source: FakeClaims, inventory: Inventory) -> Preparer:
    return Preparer(
        driver=DRIVER,
        pool=NODE,
        claims=source,
        cdi_dir=tmp_path / "cdi",
        checkpoint=Checkpoint(tmp_path / "checkpoint.json", DRIVER),
        inventory=lambda: inventory,
    )


def pod(name: str) -> PodRef:
    return PodRef("default", name, "")  # a claim names pods, not containers


# Each claim: (uid, its (request, device) pairs, the pods it is reserved for).
Claims = list[tuple[str, list[tuple[str, str]], tuple[str, ...]]]


@pytest.mark.parametrize(
    ("claims", "resource", "expected"),
    [
        pytest.param([], CARD, {}, id="nothing prepared: nobody holds anything"),
        pytest.param(
            [("u1", [("r", "card0")], ("train-0",))],
            CARD,
            {"card0": [pod("train-0")]},
            id="one claim, one pod",
        ),
        pytest.param(
            [("u1", [("r", "card0"), ("r", "card2")], ("train-0",))],
            CARD,
            {"card0": [pod("train-0")], "card2": [pod("train-0")]},
            id="two devices of one claim",
        ),
        pytest.param(
            [("u1", [("r", "card0")], ("a", "b"))],
            CARD,
            {"card0": [pod("a"), pod("b")]},
            id="a claim shared by two pods",
        ),
        pytest.param(
            [("u1", [("r", "card0"), ("l", "link0")], ("train-0",))],
            LINK,
            {"link0": [pod("train-0")]},
            id="only the devices of the resource asked",
        ),
        pytest.param(
            [("u1", [("r", "card1")], ())],
            CARD,
            {"card1": []},
            id="reserved for no pod: held, by nobody named",
        ),
    ],
)
async def test_holders_are_the_prepared_claims_pods(
    tmp_path: Path, claims: Claims, resource: str, expected: dict[str, list[PodRef]]
) -> None:
    source = FakeClaims()
    refs = [source.add(uid, *devices, pods=pods) for uid, devices, pods in claims]
    inventory = Inventory(device_names(DEVICES))
    preparer = make_preparer(tmp_path, source, inventory)
    prepared = await preparer.prepare(refs)
    assert all(isinstance(p, PreparedClaim) for p in prepared.values())
    holders = ClaimAttribution(lambda: preparer.prepared, lambda: inventory)
    assert holders.holders_of(resource) == expected
    assert list(holders.holders(resource, "card1")) == expected.get("card1", [])
    assert holders.available


async def test_unprepared_claims_hold_nothing(tmp_path: Path) -> None:
    source = FakeClaims()
    ref = source.add("u1", ("r", "card0"), pods=("train-0",))
    inventory = Inventory(device_names(DEVICES))
    preparer = make_preparer(tmp_path, source, inventory)
    await preparer.prepare([ref])
    await preparer.unprepare([ref])
    assert ClaimAttribution(lambda: preparer.prepared, lambda: inventory).holders_of(CARD) == {}
