"""Preparer and DraDriver edge cases, without gRPC: the checkpoint failing, subrequests,
claims spanning resources, a crashing backend, SIGHUP's rebuild and a bad tree."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.xid import xid_reason
from accel_plugins.dra import claim_cdi
from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim
from accel_plugins.dra.driver import DraDriver, DraSettings
from accel_plugins.dra.model import device_names
from accel_plugins.dra.prepare import Inventory, Preparer
from accel_plugins.errors import InvalidSnapshotError
from accel_plugins.plugin.backend import Publish
from accel_plugins.plugin.device import Device, DeviceNode, Health, tree
from accel_plugins.plugin.dra_taints import taint_of
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from accel_plugins.util.flock import FileLock
from tests.fixtures.dra_plugin import DRIVER, NODE, FakeClaims
from tests.fixtures.framework import ScriptedBackend
from tests.support.cdi import assert_valid_spec_file

DEVICES = tree(
    {
        "example.com/card": [Device("card0", nodes=(DeviceNode("/dev/card0"),))],
        "example.com/link": [Device("link0", envs={"LINK": "0"})],
    }
)


def preparer(
    tmp_path: Path,
    claims: FakeClaims,
    checkpoint: Path | None = None,
    shared: FileLock | None = None,
) -> Preparer:
    """A Preparer over DEVICES; with ``shared``, one pod's of a rolling update."""
    inventory = Inventory(device_names(DEVICES))
    return Preparer(
        driver=DRIVER,
        pool=NODE,
        claims=claims,
        cdi_dir=tmp_path / "cdi",
        checkpoint=Checkpoint(checkpoint or tmp_path / "checkpoint.json", DRIVER),
        inventory=lambda: inventory,
        shared=shared,
    )


async def test_a_claim_over_two_resources_and_a_subrequest(tmp_path: Path) -> None:
    claims = FakeClaims()
    # A prioritized-list request names its chosen subrequest "<request>/<subrequest>".
    ref = claims.add("uid-1", ("accel/large", "card0"), ("accel/large", "link0"))
    result = (await preparer(tmp_path, claims).prepare([ref]))["uid-1"]
    assert isinstance(result, PreparedClaim)
    assert result.devices[0].cdi_ids == (f"k8s.{DRIVER}/claim=uid-1-accel_large",)
    # A container names the main request; the kubelet matches names exactly (claiminfo.go
    # cdiDevicesAsList), so the main name goes first and the subrequest's stays.
    assert [d.requests for d in result.devices] == [("accel", "accel/large")] * 2
    spec = assert_valid_spec_file(tmp_path / "cdi" / claim_cdi.spec_file_name(DRIVER, "uid-1"))
    assert spec["devices"] == [
        {
            "name": "uid-1-accel_large",
            "containerEdits": {
                "env": ["LINK=0"],
                "deviceNodes": [{"path": "/dev/card0", "permissions": "rw"}],
            },
        }
    ]


async def test_a_checkpoint_that_cannot_be_written_fails_the_claims_and_removes_their_specs(
    tmp_path: Path,
) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    blocked = tmp_path / "checkpoint.json"
    blocked.mkdir()  # a directory where the file should be: no rename can replace it
    prep = preparer(tmp_path, claims, checkpoint=blocked)
    result = (await prep.prepare([ref]))["uid-1"]
    assert isinstance(result, str)
    assert result.startswith("cannot write the checkpoint")
    assert list((tmp_path / "cdi").iterdir()) == []
    assert prep.prepared == {}


async def test_a_spec_left_by_a_crash_is_removed_by_name(tmp_path: Path) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-9", ("r", "card0"))
    leftover = tmp_path / "cdi" / claim_cdi.spec_file_name(DRIVER, "uid-9")
    leftover.parent.mkdir()
    leftover.write_text("{}")
    assert await preparer(tmp_path, claims).unprepare([ref]) == {"uid-9": ""}
    assert not leftover.exists()


# -- the driver's backend loop ----------------------------------------------------------


class CrashingBackend:
    """Publishes once, then crashes when told to."""

    def __init__(self) -> None:
        self.crash = asyncio.Event()

    async def run(self, publish: Publish) -> None:
        publish(DEVICES)
        await self.crash.wait()
        raise RuntimeError("NVML went away")


def settings(root: Path, **more: Any) -> DraSettings:
    return DraSettings(
        driver_name=DRIVER,
        node_name=NODE,
        kubelet_plugins_dir=root / "plugins",
        plugins_registry_dir=root / "registry",
        cdi_spec_dir=root / "cdi",
        **more,
    )


async def test_a_crashed_backend_leaves_its_devices_unhealthy_until_rebuilt(
    dra_root: Path,
) -> None:
    backends = [CrashingBackend(), CrashingBackend()]
    built = iter(backends)
    driver = DraDriver(
        lambda: next(built), settings(dra_root, backend_restart_delay=0.05), FakeClaims()
    )
    task = asyncio.create_task(driver.run())
    await asyncio.wait_for(driver.ready.wait(), 5)
    assert {s.device: s.healthy for s in driver.feed.states} == {"card0": True, "link0": True}
    backends[0].crash.set()
    async for _, states in driver.feed.watch():
        if not any(s.healthy for s in states):
            break
    async for _, states in driver.feed.watch():
        if all(s.healthy for s in states):
            break
    assert driver.backend is backends[1]
    driver.stop()
    await task


async def test_reload_swaps_in_the_new_backend(dra_root: Path) -> None:
    first = ScriptedBackend(DEVICES)
    second = ScriptedBackend(tree({"example.com/card": [Device("card7")]}))
    built = iter([first, second])
    driver = DraDriver(lambda: next(built), settings(dra_root), FakeClaims())
    task = asyncio.create_task(driver.run())
    await asyncio.wait_for(driver.ready.wait(), 5)
    await asyncio.wait_for(first.started.wait(), 5)
    driver.reload()
    await asyncio.wait_for(second.started.wait(), 5)
    assert sorted(driver.inventory.devices) == ["card7"]
    driver.stop()
    await task


async def test_an_invalid_device_id_stops_the_driver(dra_root: Path) -> None:
    bad = ScriptedBackend(tree({"example.com/card": [Device("card 0")]}))
    driver = DraDriver(lambda: bad, settings(dra_root), FakeClaims())
    with pytest.raises(InvalidSnapshotError, match="whitespace"):
        await asyncio.wait_for(driver.run(), 5)


@pytest.mark.parametrize(
    ("name", "node", "problem"),
    [
        pytest.param("Gpu.Example.com", NODE, "DNS subdomain", id="upper-case-driver"),
        pytest.param("-gpu.example.com", NODE, "DNS subdomain", id="leading-dash"),
        pytest.param("", NODE, "must not be empty", id="empty-driver"),
        pytest.param(DRIVER, "", "required with --kubelet-api dra", id="no-node"),
    ],
)
def test_settings_refuse(name: str, node: str, problem: str) -> None:
    with pytest.raises(Exception, match=problem):
        DraSettings(driver_name=name, node_name=node)


@pytest.mark.parametrize("pods", [(), ("trainer-0",)], ids=["no pods", "its pod"])
def test_checkpoint_round_trip(tmp_path: Path, pods: tuple[str, ...]) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    checkpoint = Checkpoint(tmp_path / "c.json", DRIVER)
    claim = PreparedClaim(ref, (), "spec.json", consumers=pods)
    checkpoint.save({"uid-1": claim})
    assert checkpoint.load() == {"uid-1": claim}
    saved = json.loads((tmp_path / "c.json").read_text())["claims"]["uid-1"]
    assert saved.get("pods", []) == list(pods)  # absent when none: older readers agree
    assert json.loads((tmp_path / "c.json").read_text())["version"] == 1
    assert (tmp_path / "c.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("reason", "prepared"),
    [
        pytest.param(HealthReason(ReasonKind.UNMONITORED), True, id="unmonitored: effect None"),
        pytest.param(xid_reason(13), True, id="application XID 13: effect None"),
        pytest.param(xid_reason(79), False, id="XID 79, GPU fallen off the bus: NoSchedule"),
    ],
)
async def test_an_informational_taint_needs_no_toleration(
    tmp_path: Path, reason: HealthReason, prepared: bool
) -> None:
    """KEP-5055 (1.35+): the scheduler hands a device tainted with effect None to claims
    without tolerations, so Prepare must take it too; NoSchedule still needs one."""
    sick = Device("card0", nodes=(DeviceNode("/dev/card0"),), health=Health.UNHEALTHY)
    sick = dataclasses.replace(sick, reason=reason)
    inventory = Inventory(device_names(tree({"example.com/card": [sick]})))
    claims = FakeClaims()
    ref = claims.add("uid-1", ("accel", "card0"))
    result = await Preparer(
        driver=DRIVER,
        pool=NODE,
        claims=claims,
        cdi_dir=tmp_path / "cdi",
        checkpoint=Checkpoint(tmp_path / "checkpoint.json", DRIVER),
        inventory=lambda: inventory,
        taint=lambda resource, device: taint_of(DRIVER, None, resource, device),
    ).prepare([ref])
    if prepared:
        assert isinstance(result["uid-1"], PreparedClaim)
    else:
        assert "does not tolerate its taint" in str(result["uid-1"])
