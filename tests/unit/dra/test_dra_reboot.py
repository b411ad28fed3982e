"""A node's reboot, and specs removed by hand, through the DRA driver's real gRPC service.

The facts: /var/run/cdi is a tmpfs (a reboot empties it) while the kubelet's
plugins directory, where the checkpoint lives, is not; after a reboot the
kubelet calls NodePrepareResources again for the claims of the pods it starts,
and the runtime refuses every container whose CDI names no spec defines
(kubernetes/kubernetes#141433 reports it of the example driver). NVIDIA's DRA
driver records the kernel's boot_id in its checkpoint (``nodeBootID``,
cmd/gpu-kubelet-plugin/checkpointv.go; read from /proc/sys/kernel/random/boot_id,
pkg/bootid/bootid.go), takes a checkpoint without one as valid and stamps it
(cmd/gpu-kubelet-plugin/device_state.go, NewDeviceState).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.dra import checkpoint as cp
from accel_plugins.dra.model import ClaimRef
from accel_plugins.plugin.device import Device, DeviceNode, tree
from tests.fixtures.dra_plugin import DRIVER, FakeClaims, RunningDriver, SpecKeepingBackend
from tests.support.cdi import assert_valid_spec_file

RESOURCE = "example.com/card"


def cards(spec_dir: Path) -> SpecKeepingBackend:
    devices = [Device(f"card{i}", nodes=(DeviceNode(f"/dev/card{i}"),)) for i in range(2)]
    return SpecKeepingBackend(tree({RESOURCE: devices}), spec_dir)


async def prepare(running: RunningDriver, *refs: ClaimRef) -> v1.NodePrepareResourcesResponse:
    claims = [v1.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs]
    request = v1.NodePrepareResourcesRequest(claims=claims)
    return await running.v1.NodePrepareResources(request, timeout=5)


def on_disk(spec_dir: Path) -> dict[str, str]:
    """Every CDI name the JSON specs in ``spec_dir`` define, with the file defining it."""
    names: dict[str, str] = {}
    for path in sorted(spec_dir.glob("*.json")):
        spec = assert_valid_spec_file(path)
        names |= {f"{spec['kind']}={d['name']}": path.name for d in spec["devices"]}
    return names


def texts(spec_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(spec_dir.iterdir())}


def empty(spec_dir: Path) -> None:
    shutil.rmtree(spec_dir)


def garble(spec_dir: Path) -> None:
    for path in spec_dir.iterdir():
        path.write_text('{"cdiVersion": "0.3.0", "kind": "x.com/y", "devices": []}')


@pytest.fixture
def boot(dra_root: Path) -> Callable[[str], dict[str, Any]]:
    """``boot("b1")``: this boot's ID in a file, as settings for start_driver."""
    path = dra_root / "boot_id"

    def at(boot_id: str) -> dict[str, Any]:
        path.write_text(boot_id + "\n")
        return {"boot_id_path": path}

    return at


@pytest.mark.parametrize(
    ("boot_after", "damage"),
    [
        pytest.param("boot-2", empty, id="reboot: new boot ID, /var/run/cdi empty"),
        pytest.param("boot-1", empty, id="plugin restart, spec dir emptied meanwhile"),
        pytest.param("boot-1", garble, id="plugin restart, specs changed meanwhile"),
    ],
)
async def test_a_restarted_driver_writes_the_specs_again_and_answers_as_before(
    start_driver: Any,
    dra_root: Path,
    boot: Callable[[str], dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
    boot_after: str,
    damage: Callable[[Path], None],
) -> None:
    spec_dir = dra_root / "cdi"
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    first: RunningDriver = await start_driver(cards(spec_dir), claims, **boot("boot-1"))
    before = await prepare(first, ref)
    names = list(before.claims["uid-1"].devices[0].cdi_device_ids)
    assert names == [f"k8s.{DRIVER}/claim=uid-1-r", SpecKeepingBackend.NAME]
    written = texts(spec_dir)
    await first.stop()
    damage(spec_dir)

    caplog.set_level(logging.INFO)
    backend = cards(spec_dir)
    second: RunningDriver = await start_driver(backend, claims, **boot(boot_after))
    # The claim's spec is back before the kubelet can ask (ready: the socket is served).
    assert texts(spec_dir) == written
    saved = json.loads(second.settings.checkpoint_path.read_text())
    assert saved["bootID"] == boot_after

    assert await prepare(second, ref) == before
    assert len(claims.calls) == 1  # from the checkpoint: no API read
    assert set(names) <= set(on_disk(spec_dir))
    reboots = [r for r in caplog.records if "the node rebooted" in r.getMessage()]
    assert len(reboots) == (1 if boot_after != "boot-1" else 0)


async def test_a_spec_removed_while_running_is_written_again_before_the_answer(
    start_driver: Any, dra_root: Path
) -> None:
    spec_dir = dra_root / "cdi"
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    backend = cards(spec_dir)
    running: RunningDriver = await start_driver(backend, claims)
    before = await prepare(running, ref)
    written = texts(spec_dir)
    empty(spec_dir)
    assert await prepare(running, ref) == before
    assert texts(spec_dir) == written  # the claim's from the checkpoint, the backend's by it
    assert backend.ensured == 2  # before each answer naming its devices
    assert len(claims.calls) == 1


def legacy_checkpoint(path: Path, ref: ClaimRef, spec_file: str) -> None:
    """A checkpoint as written before boot IDs and spec records: version 1, neither field."""
    device = cp.PreparedDevice(("r",), "node-a", "card0", (f"k8s.{DRIVER}/claim=uid-1-r",))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cp.dumps(DRIVER, {ref.uid: cp.PreparedClaim(ref, (device,), spec_file)}))
    assert "bootID" not in path.read_text()
    assert "cdiSpec" not in path.read_text()


@pytest.mark.parametrize(
    ("spec_left", "api_reads"),
    [
        pytest.param(True, 0, id="spec still there: answered from the checkpoint"),
        pytest.param(False, 1, id="spec gone, no record to write it from: prepared afresh"),
    ],
)
async def test_a_checkpoint_without_boot_id_or_spec_record_still_loads(
    start_driver: Any,
    dra_root: Path,
    boot: Callable[[str], dict[str, Any]],
    spec_left: bool,
    api_reads: int,
) -> None:
    spec_dir = dra_root / "cdi"
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    # The spec as the older plugin wrote it, for the first case.
    writer: RunningDriver = await start_driver(cards(spec_dir), claims, **boot("b0"))
    await prepare(writer, ref)
    await writer.stop()
    spec_file = f"k8s.{DRIVER}_claim_uid-1.json"
    checkpoint = writer.settings.checkpoint_path
    legacy_checkpoint(checkpoint, ref, spec_file)
    if not spec_left:
        (spec_dir / spec_file).unlink()
    claims.calls.clear()

    running: RunningDriver = await start_driver(cards(spec_dir), claims, **boot("b1"))
    assert json.loads(checkpoint.read_text())["bootID"] == "b1"  # stamped, as NVIDIA does
    answer = (await prepare(running, ref)).claims["uid-1"]
    assert answer.error == ""
    assert set(answer.devices[0].cdi_device_ids) <= set(on_disk(spec_dir))
    assert len(claims.calls) == api_reads
    if api_reads:
        assert "cdiSpec" in json.loads(checkpoint.read_text())["claims"]["uid-1"]


class NamesAnUnknownDevice(SpecKeepingBackend):
    """Names a CDI device its spec does not define: nothing can make the name true."""

    NAME = f"{SpecKeepingBackend.KIND}=gone"

    def allocate(self, resource: str, devices: Any) -> Any:
        answer = super().allocate(resource, devices)
        return type(answer)(envs=answer.envs, cdi_devices=(self.NAME,))


def spec_dir_is_a_file(spec_dir: Path) -> None:
    shutil.rmtree(spec_dir)
    spec_dir.write_text("")


async def test_a_name_no_spec_defines_is_the_claims_error_not_an_answer(
    start_driver: Any, dra_root: Path
) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    running: RunningDriver = await start_driver(
        NamesAnUnknownDevice(tree({RESOURCE: [Device("card0")]}), dra_root / "cdi"), claims
    )
    error = (await prepare(running, ref)).claims["uid-1"].error
    assert f"CDI devices {NamesAnUnknownDevice.NAME} are not defined" in error
    assert running.driver.preparer.prepared == {}  # not remembered: the kubelet asks again
    assert not (dra_root / "cdi" / f"k8s.{DRIVER}_claim_uid-1.json").exists()


async def test_a_spec_that_cannot_be_written_again_is_the_claims_error(
    start_driver: Any, dra_root: Path
) -> None:
    spec_dir = dra_root / "cdi"
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    running: RunningDriver = await start_driver(cards(spec_dir), claims)
    assert (await prepare(running, ref)).claims["uid-1"].error == ""
    spec_dir_is_a_file(spec_dir)
    error = (await prepare(running, ref)).claims["uid-1"].error
    assert error.startswith("cannot write the claim's CDI spec")
    assert "uid-1" in running.driver.preparer.prepared  # still prepared: unprepare cleans up
    spec_dir.unlink()
    assert (await prepare(running, ref)).claims["uid-1"].error == ""  # the kubelet's retry


def test_the_checkpoint_records_the_boot_and_each_claims_spec(tmp_path: Path) -> None:
    ref = ClaimRef(uid="uid-1", namespace="default", name="c")
    claim = cp.PreparedClaim(ref, (), "spec.json", '{\n  "kind": "a.com/b"\n}\n')
    checkpoint = cp.Checkpoint(tmp_path / "c.json", DRIVER, boot_id="b1")
    checkpoint.save({"uid-1": claim})
    assert checkpoint.read() == cp.Saved("b1", {"uid-1": claim})
    saved = json.loads((tmp_path / "c.json").read_text())
    assert (saved["version"], saved["bootID"]) == (1, "b1")  # older plugins still read it
    assert saved["claims"]["uid-1"]["cdiSpec"] == {"kind": "a.com/b"}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("0b7e-4c\n", "0b7e-4c", id="the kernel's line"),
        pytest.param("", None, id="empty"),
        pytest.param(None, None, id="missing"),
    ],
)
def test_read_boot_id(tmp_path: Path, content: str | None, expected: str | None) -> None:
    path = tmp_path / "boot_id"
    if content is not None:
        path.write_text(content)
    assert cp.read_boot_id(path) == expected
