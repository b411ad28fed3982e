"""The DRA kubelet plugin over real gRPC on real unix sockets, v1 and v1beta1.

What is checked comes from the kubelet's DRA API (k8s.io/kubelet
pkg/apis/dra/v1/api.proto comments: answers keyed by claim UID, a claim's
failure in its ``error``, unprepare of an unknown claim succeeds), its
registration handler (pkg/kubelet/cm/dra/plugin/registration.go: type
DRAPlugin, services ``v1.DRAPlugin``/``v1beta1.DRAPlugin``), and the CDI
spec format (validated against the CDI project's schema).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from accel_plugins.api import dra_health_v1_pb2 as health_v1
from accel_plugins.api import dra_health_v1alpha1_pb2 as health_pb
from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.api import dra_v1beta1_pb2 as v1beta1
from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.dra.model import ClaimError
from accel_plugins.errors import AllocationError
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceNode, Health, Mount, tree
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from tests.fixtures.dra_plugin import DRIVER, NODE, FakeClaims, RunningDriver, SpecKeepingBackend
from tests.fixtures.framework import ScriptedBackend
from tests.fixtures.nvidia import simulated_backend
from tests.support.cdi import assert_valid_spec_file

RESOURCE = "example.com/card"
KIND = f"k8s.{DRIVER}/claim"
VERSIONS = [pytest.param(v1, id="v1"), pytest.param(v1beta1, id="v1beta1")]


def card(n: int, health: Health = Health.HEALTHY) -> Device:
    return Device(
        f"card{n}",
        health=health,
        nodes=(DeviceNode(f"/dev/card{n}"),),
        mounts=(Mount("/opt/card/lib", read_only=True),),
        envs={"CARDS": f"card{n}"},
    )


def backend(*devices: Device) -> ScriptedBackend:
    return ScriptedBackend(tree({RESOURCE: list(devices) or [card(0), card(1), card(2)]}))


def stub(running: RunningDriver, api: Any) -> Any:
    return running.v1 if api is v1 else running.v1beta1


def claims_of(api: Any, *refs: Any) -> list[Any]:
    return [api.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs]


async def prepare(running: RunningDriver, api: Any, *refs: Any) -> Any:
    request = api.NodePrepareResourcesRequest(claims=claims_of(api, *refs))
    return await stub(running, api).NodePrepareResources(request, timeout=5)


async def unprepare(running: RunningDriver, api: Any, *refs: Any) -> Any:
    request = api.NodeUnprepareResourcesRequest(claims=claims_of(api, *refs))
    return await stub(running, api).NodeUnprepareResources(request, timeout=5)


def spec_path(running: RunningDriver, uid: str) -> Path:
    return running.settings.cdi_spec_dir / f"k8s.{DRIVER}_claim_{uid}.json"


# -- registration -------------------------------------------------------------------


async def test_registration_socket_answers_get_info_as_the_kubelet_expects(
    start_driver: Any,
) -> None:
    running: RunningDriver = await start_driver(backend(), FakeClaims())
    socket = running.settings.registration_socket
    assert socket == running.settings.plugins_registry_dir / f"{DRIVER}-reg.sock"
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        info = await running.registration(channel).GetInfo(reg.InfoRequest(), timeout=5)
        assert info.type == "DRAPlugin"
        assert info.name == DRIVER
        assert info.endpoint == str(running.settings.kubelet_plugins_dir / DRIVER / "dra.sock")
        # The health services too: a 1.37 kubelet picks v1 from them
        # (pkg/kubelet/cm/dra/plugin/dra_plugin_manager_test.go, TestPickHealthService).
        assert list(info.supported_versions) == [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        ]
        await running.registration(channel).NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=True), timeout=5
        )
    assert running.driver.registered
    assert running.driver.problems() == []


# -- prepare ------------------------------------------------------------------------


@pytest.mark.parametrize("api", VERSIONS)
async def test_prepare_writes_a_valid_claim_spec_and_returns_its_cdi_ids(
    start_driver: Any, api: Any
) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("gpus", "card0"), ("gpus", "card1"), ("other", "card2"))
    running: RunningDriver = await start_driver(backend(), claims)

    answer = (await prepare(running, api, ref)).claims["uid-1"]

    assert answer.error == ""
    got = [
        (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
        for d in answer.devices
    ]
    assert got == [
        (["gpus"], NODE, "card0", [f"{KIND}=uid-1-gpus"]),
        (["gpus"], NODE, "card1", []),  # one CDI device per request, named once
        (["other"], NODE, "card2", [f"{KIND}=uid-1-other"]),
    ]
    spec = assert_valid_spec_file(spec_path(running, "uid-1"))
    assert spec["kind"] == KIND
    devices = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert sorted(devices) == ["uid-1-gpus", "uid-1-other"]
    gpus = devices["uid-1-gpus"]
    # The device-plugin path's merge: env of the later device wins, nodes once each.
    assert gpus["env"] == ["CARDS=card1"]
    assert [n["path"] for n in gpus["deviceNodes"]] == ["/dev/card0", "/dev/card1"]
    assert gpus["mounts"] == [
        {"hostPath": "/opt/card/lib", "containerPath": "/opt/card/lib", "options": ["bind", "ro"]}
    ]


@pytest.mark.parametrize("api", VERSIONS)
async def test_prepare_twice_gives_the_same_answer_without_reading_the_claim_again(
    start_driver: Any, api: Any
) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    running: RunningDriver = await start_driver(backend(), claims)
    first = await prepare(running, api, ref)
    second = await prepare(running, api, ref)
    assert first == second
    assert len(claims.calls) == 1


class RefusingBackend(ScriptedBackend):
    def allocate(self, resource: str, devices: Any) -> ContainerAllocation:
        raise AllocationError("card2 is reserved for the firmware update")


@pytest.mark.parametrize(
    ("make_claim", "error"),
    [
        pytest.param(
            lambda c: c.fail("bad", ClaimError("resourceclaim default/claim-bad not found")),
            "not found",
            id="claim-missing (ClaimSource contract)",
        ),
        pytest.param(
            lambda c: c.fail("bad", RuntimeError("connection refused")),
            "connection refused",
            id="api-server-error",
        ),
        pytest.param(
            lambda c: c.add("bad", ("r", "card9")),
            "device card9 (request r) is not served on node node-a",
            id="device-not-on-this-node",
        ),
        pytest.param(lambda c: c.add("bad", ("r", "sick")), "unhealthy", id="unhealthy-device"),
        pytest.param(lambda c: c.add("bad"), "has no devices of driver", id="no-devices"),
    ],
)
async def test_a_failing_claim_gets_its_error_and_the_others_are_prepared(
    start_driver: Any, make_claim: Any, error: str
) -> None:
    claims = FakeClaims()
    good = claims.add("good", ("r", "card0"))
    bad = make_claim(claims)
    running: RunningDriver = await start_driver(
        backend(card(0), Device("sick", health=Health.UNHEALTHY)), claims
    )
    answer = await prepare(running, v1, good, bad)
    assert answer.claims["good"].error == ""
    assert error in answer.claims["bad"].error
    assert not answer.claims["bad"].devices
    assert not spec_path(running, "bad").exists()
    # Not remembered: a retry reads the claim again.
    await prepare(running, v1, bad)
    assert [c.uid for c in claims.calls].count("bad") == 2


async def test_an_allocate_hook_refusal_is_the_claims_error(start_driver: Any) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card2"))
    running: RunningDriver = await start_driver(
        RefusingBackend(tree({RESOURCE: [card(2)]})), claims
    )
    answer = (await prepare(running, v1, ref)).claims["uid-1"]
    assert "reserved for the firmware update" in answer.error


async def test_the_backends_allocate_hook_gives_the_edits_and_its_cdi_names_pass_through(
    start_driver: Any, dra_root: Path
) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"), ("r", "card1"))
    running: RunningDriver = await start_driver(
        SpecKeepingBackend(backend().tree, dra_root / "cdi"), claims
    )
    answer = (await prepare(running, v1, ref)).claims["uid-1"]
    assert list(answer.devices[0].cdi_device_ids) == [f"{KIND}=uid-1-r", SpecKeepingBackend.NAME]
    spec = assert_valid_spec_file(spec_path(running, "uid-1"))
    assert spec["devices"][0]["containerEdits"] == {"env": ["VISIBLE=card0,card1"]}


@pytest.mark.parametrize("api", VERSIONS)
@pytest.mark.parametrize(
    ("claims", "problem"),
    [
        pytest.param([("default", "", "c")], "uid must not be empty", id="empty-uid"),
        pytest.param([("", "u", "c")], "namespace must not be empty", id="empty-namespace"),
        pytest.param([("default", "u", "")], "name must not be empty", id="empty-name"),
        pytest.param([("default", "u", "a"), ("default", "u", "b")], "given twice", id="uid-twice"),
    ],
)
async def test_a_malformed_request_gets_invalid_argument(
    start_driver: Any, api: Any, claims: list[tuple[str, str, str]], problem: str
) -> None:
    running: RunningDriver = await start_driver(backend(), FakeClaims())
    message = [api.Claim(namespace=n, uid=u, name=c) for n, u, c in claims]
    for call, request in (
        (stub(running, api).NodePrepareResources, api.NodePrepareResourcesRequest),
        (stub(running, api).NodeUnprepareResources, api.NodeUnprepareResourcesRequest),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(request(claims=message), timeout=5)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert problem in (raised.value.details() or "")


# -- unprepare and restarts -------------------------------------------------------


@pytest.mark.parametrize("api", VERSIONS)
async def test_unprepare_removes_the_spec_and_is_idempotent(start_driver: Any, api: Any) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    unknown = claims.add("never-prepared", ("r", "card1"))
    running: RunningDriver = await start_driver(backend(), claims)
    await prepare(running, api, ref)
    assert spec_path(running, "uid-1").exists()

    for _ in range(2):
        answer = await unprepare(running, api, ref, unknown)
        assert {uid: r.error for uid, r in answer.claims.items()} == {
            "uid-1": "",
            "never-prepared": "",
        }
        assert not spec_path(running, "uid-1").exists()
    checkpoint = json.loads(running.settings.checkpoint_path.read_text())
    assert checkpoint["claims"] == {}


async def test_a_restarted_driver_keeps_prepared_claims(start_driver: Any) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    first: RunningDriver = await start_driver(backend(), claims)
    before = await prepare(first, v1, ref)
    await first.stop()
    assert spec_path(first, "uid-1").exists()  # specs outlive the process
    assert not first.settings.socket_path.exists()

    second: RunningDriver = await start_driver(backend(), claims)
    assert await prepare(second, v1beta1, ref) == v1beta1.NodePrepareResourcesResponse.FromString(
        before.SerializeToString()
    )
    assert len(claims.calls) == 1  # answered from the checkpoint
    assert (await unprepare(second, v1, ref)).claims["uid-1"].error == ""
    assert not spec_path(second, "uid-1").exists()


async def test_an_unreadable_checkpoint_is_set_aside(start_driver: Any, dra_root: Path) -> None:
    checkpoint = dra_root / "plugins" / DRIVER / "checkpoint.json"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text("{not json")
    running: RunningDriver = await start_driver(backend(), FakeClaims())
    assert running.driver.preparer.prepared == {}
    assert checkpoint.with_name("checkpoint.json.corrupt").read_text() == "{not json"


async def test_a_removed_socket_is_served_again(start_driver: Any) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    running: RunningDriver = await start_driver(backend(), claims)
    running.settings.socket_path.unlink()
    running.settings.registration_socket.unlink()
    for _ in range(100):
        if running.settings.socket_path.exists() and running.settings.registration_socket.exists():
            break
        await asyncio.sleep(0.02)
    assert (await prepare(running, v1, ref)).claims["uid-1"].error == ""
    # The health feed outlives the server it was served by.
    stream = running.health.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=5)
    assert [d.device.device_name for d in (await next_health(stream)).devices] == [
        "card0",
        "card1",
        "card2",
    ]
    stream.cancel()


# -- health ---------------------------------------------------------------------------


async def next_health(stream: Any) -> health_pb.NodeWatchResourcesResponse:
    message = await stream.read()
    assert isinstance(message, health_pb.NodeWatchResourcesResponse)
    return message


async def test_health_streams_the_full_list_and_every_change(start_driver: Any) -> None:
    scripted = backend(card(0), card(1))
    running: RunningDriver = await start_driver(scripted, FakeClaims())
    stream = running.health.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=5)

    def states(response: health_pb.NodeWatchResourcesResponse) -> dict[str, int]:
        assert {d.device.pool_name for d in response.devices} == {NODE}
        assert all(d.last_updated_time > 0 for d in response.devices)
        return {d.device.device_name: d.health for d in response.devices}

    healthy = {"card0": health_pb.HEALTHY, "card1": health_pb.HEALTHY}
    assert states(await next_health(stream)) == healthy
    scripted.set(tree({RESOURCE: [card(0), card(1, Health.UNHEALTHY)]}))
    assert states(await next_health(stream)) == {
        "card0": health_pb.HEALTHY,
        "card1": health_pb.UNHEALTHY,
    }
    scripted.set(tree({RESOURCE: [card(0)]}))  # unplugged: gone from the list
    assert states(await next_health(stream)) == {"card0": health_pb.HEALTHY}
    stream.cancel()


async def test_health_is_sent_again_before_the_kubelet_counts_it_stale(
    start_driver: Any,
) -> None:
    running: RunningDriver = await start_driver(backend(card(0)), FakeClaims(), health_refresh=0.05)
    stream = running.health.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=5)
    first = await next_health(stream)
    again = await next_health(stream)  # no change: the refresh
    assert [d.device.device_name for d in again.devices] == ["card0"]
    assert again.devices[0].last_updated_time >= first.devices[0].last_updated_time
    stream.cancel()


HEALTH_VERSIONS = [pytest.param("v1", id="v1"), pytest.param("v1alpha1", id="v1alpha1")]
GONE = HealthReason(ReasonKind.NODE_VANISHED, "/dev/card1 is gone")


def health_stream(running: RunningDriver, version: str) -> Any:
    if version == "v1":
        return running.health_v1.NodeWatchResources(
            health_v1.NodeWatchResourcesRequest(), timeout=5
        )
    return running.health.NodeWatchResources(health_pb.NodeWatchResourcesRequest(), timeout=5)


@pytest.mark.parametrize("version", HEALTH_VERSIONS)
async def test_health_carries_the_reason_as_its_message(start_driver: Any, version: str) -> None:
    scripted = backend(card(0), card(1))
    running: RunningDriver = await start_driver(scripted, FakeClaims())
    stream = health_stream(running, version)
    first = await stream.read()
    assert [d.message for d in first.devices] == ["", ""]
    scripted.set(tree({RESOURCE: [card(0), card(1).with_health(Health.UNHEALTHY, GONE)]}))
    changed = await stream.read()
    assert [(d.device.device_name, d.health, d.message) for d in changed.devices] == [
        ("card0", health_v1.HEALTHY, ""),
        ("card1", health_v1.UNHEALTHY, "node-vanished: /dev/card1 is gone"),
    ]
    stream.cancel()


async def test_a_message_longer_than_the_kubelet_keeps_is_cut_as_the_kubelet_would(
    start_driver: Any,
) -> None:
    # The kubelet keeps 1024 characters, cutting to 1021 plus "..." (dra-health v1 api.proto).
    long = HealthReason(ReasonKind.OTHER, "x" * 2000)
    scripted = backend(card(0).with_health(Health.UNHEALTHY, long))
    running: RunningDriver = await start_driver(scripted, FakeClaims())
    stream = health_stream(running, "v1")
    (device,) = (await stream.read()).devices
    assert len(device.message) == 1024
    assert device.message.endswith("x...")
    stream.cancel()


async def test_a_gpu_recovers_in_dra_mode_after_the_quiet_period(start_driver: Any) -> None:
    """The device-plugin path's recovery rule (quiet period, then a passing probe) holds
    in DRA mode too: the stream reports the XID with its meaning, then Healthy again."""
    nvidia, nvml = simulated_backend("pcie-4gpu", recovery=0.2)
    running: RunningDriver = await start_driver(nvidia, FakeClaims())
    stream = health_stream(running, "v1")
    first = await stream.read()
    assert nvidia.monitor is not None
    await asyncio.wait_for(nvidia.monitor.ready.wait(), 10)
    nvml.inject_xid(1, 79)
    # Each distinct list of states, in order.
    seen: list[tuple[int, ...]] = [tuple(d.health for d in first.devices)]
    messages: set[str] = set()
    async with asyncio.timeout(10):
        while len(seen) < 3:
            response = await stream.read()
            states = tuple(d.health for d in response.devices)
            messages |= {d.message for d in response.devices if d.message}
            if seen[-1] != states:
                seen.append(states)
    ok, bad = health_v1.HEALTHY, health_v1.UNHEALTHY
    assert seen == [(ok, ok, ok, ok), (ok, bad, ok, ok), (ok, ok, ok, ok)]
    assert messages == {"xid 79: GPU has fallen off the bus"}
    stream.cancel()
