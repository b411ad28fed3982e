"""Every DevicePlugin RPC with random input, against a real server on a unix socket.

Random IDs, duplicates, huge lists, empty requests, sizes out of range, raw
bytes that are not even the request message. The answer is either valid (it
says what the API promises) or a gRPC error status with a message; a call
never hangs (every call has a deadline) and the server answers afterwards.
Where the request is valid the server must accept it, and where it is not it
must say INVALID_ARGUMENT: the oracle below is the API contract.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

import grpc
import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.plugin.device import Device, DeviceNode, Health
from accel_plugins.runtime.capabilities import Capabilities
from tests.fixtures.framework import HookedBackend, Served, ServePlugin

T = TypeVar("T")
DEADLINE = 5.0
FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
UNHEALTHY = {"w3", "w7"}
DEVICES = {
    f"w{i}": Device(
        f"w{i}",
        health=Health.UNHEALTHY if f"w{i}" in UNHEALTHY else Health.HEALTHY,
        numa_nodes=(i // 4,),
        nodes=(DeviceNode(f"/dev/w{i}"),),
    )
    for i in range(12)
}
KNOWN = sorted(DEVICES)
METHOD = "/v1beta1.DevicePlugin/{}"

odd_ids = st.sampled_from(["", " ", "w1 ", "W1", "w1\x00", "../w1", "w01", "é", "x" * 10_000])
plain_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=16)


@st.composite
def id_lists(draw: st.DrawFn) -> list[str]:
    """Known IDs, odd ones and random text; sometimes repeated into a huge list."""
    ids = draw(st.lists(st.one_of(st.sampled_from(KNOWN), odd_ids, plain_text), max_size=6))
    if any(len(i) > 100 for i in ids):
        return ids
    return ids * draw(st.sampled_from([1, 1, 1, 2, 5_000]))


sizes = st.one_of(st.integers(-3, 14), st.sampled_from([-(2**31), 2**31 - 1]))


@pytest.fixture(
    params=[
        pytest.param(Capabilities(), id="framework-defaults"),
        pytest.param(Capabilities.of(HookedBackend()), id="backend-hooks"),
    ]
)
async def served(request: pytest.FixtureRequest, serve_plugin: ServePlugin) -> Served:
    capabilities: Capabilities = request.param
    return await serve_plugin(DEVICES, capabilities)


async def outcome(call: Awaitable[T]) -> T | grpc.aio.AioRpcError:
    """The answer, or the error status, of one call."""
    try:
        return await call
    except grpc.aio.AioRpcError as error:
        return error


async def still_answers(served: Served) -> None:
    await served.stub.GetDevicePluginOptions(pb.Empty(), timeout=DEADLINE)


def assert_refused(error: grpc.aio.AioRpcError) -> None:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert error.details(), "an error status carries a message"


def resolvable(ids: Sequence[str], *, healthy: bool) -> bool:
    """Non-empty, known, distinct (and healthy when asked): what Allocate may be given."""
    return (
        bool(ids)
        and len(set(ids)) == len(ids)
        and all(i in DEVICES and (not healthy or DEVICES[i].healthy) for i in ids)
    )


@FUZZ
@given(containers=st.lists(id_lists(), max_size=4))
async def test_allocate(served: Served, containers: list[list[str]]) -> None:
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devicesIDs=ids) for ids in containers]
    )
    valid = bool(containers) and all(resolvable(ids, healthy=True) for ids in containers)
    answer = await outcome(served.stub.Allocate(request, timeout=DEADLINE))
    if isinstance(answer, grpc.aio.AioRpcError):
        assert not valid, f"refused a valid request: {answer.details()}"
        assert_refused(answer)
    else:
        assert valid, "accepted an invalid request"
        assert len(answer.container_responses) == len(containers)
        if served.servicer.capabilities.allocator is None:
            for ids, response in zip(containers, answer.container_responses, strict=True):
                assert sorted(d.host_path for d in response.devices) == sorted(
                    f"/dev/{i}" for i in ids
                )
    await still_answers(served)


@st.composite
def preferred_requests(draw: st.DrawFn) -> tuple[list[str], list[str], int]:
    return draw(id_lists()), draw(id_lists()), draw(sizes)


def preferred_valid(available: list[str], must: list[str], size: int) -> bool:
    offered = {i for i in available if i in DEVICES}
    if must and not resolvable(must, healthy=False):
        return False
    return 0 < size <= len(offered) and len(must) <= size and set(must) <= offered


@FUZZ
@given(containers=st.lists(preferred_requests(), max_size=3))
async def test_get_preferred_allocation(
    served: Served, containers: list[tuple[list[str], list[str], int]]
) -> None:
    request = pb.PreferredAllocationRequest(
        container_requests=[
            pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
            )
            for available, must, size in containers
        ]
    )
    valid = all(preferred_valid(*c) for c in containers)
    answer = await outcome(served.stub.GetPreferredAllocation(request, timeout=DEADLINE))
    if isinstance(answer, grpc.aio.AioRpcError):
        assert not valid, f"refused a valid request: {answer.details()}"
        assert_refused(answer)
    else:
        assert valid, "accepted an invalid request"
        for (available, must, size), response in zip(
            containers, answer.container_responses, strict=True
        ):
            chosen = list(response.deviceIDs)
            assert len(chosen) == len(set(chosen)) == size
            assert set(chosen) <= set(available) & set(DEVICES)
            assert set(must) <= set(chosen)
    await still_answers(served)


@FUZZ
@given(ids=id_lists())
async def test_pre_start_container(served: Served, ids: list[str]) -> None:
    # Without a hook there is nothing to check, so anything is fine.
    valid = served.servicer.capabilities.pre_starter is None or resolvable(ids, healthy=False)
    answer = await outcome(
        served.stub.PreStartContainer(pb.PreStartContainerRequest(devicesIDs=ids), timeout=DEADLINE)
    )
    if isinstance(answer, grpc.aio.AioRpcError):
        assert not valid, f"refused a valid request: {answer.details()}"
        assert_refused(answer)
    else:
        assert valid, "accepted an invalid request"
    await still_answers(served)


@FUZZ
@given(streams=st.integers(1, 12), dropped=st.integers(0, 12))
async def test_list_and_watch_streams_come_and_go(
    served: Served, streams: int, dropped: int
) -> None:
    options = await served.stub.GetDevicePluginOptions(pb.Empty(), timeout=DEADLINE)
    assert options.get_preferred_allocation_available
    calls = [served.stub.ListAndWatch(pb.Empty(), timeout=DEADLINE) for _ in range(streams)]
    # Some callers hang up before reading anything, the rest read the full list.
    for call in calls[:dropped]:
        call.cancel()
    for call in calls[dropped:]:
        first = await call.read()
        assert isinstance(first, pb.ListAndWatchResponse)
        assert {d.ID: d.health for d in first.devices} == {
            i: d.health.value for i, d in DEVICES.items()
        }
        call.cancel()
    await still_answers(served)


RPCS = [
    pytest.param("GetDevicePluginOptions", pb.Empty, id="GetDevicePluginOptions"),
    pytest.param(
        "GetPreferredAllocation", pb.PreferredAllocationRequest, id="GetPreferredAllocation"
    ),
    pytest.param("Allocate", pb.AllocateRequest, id="Allocate"),
    pytest.param("PreStartContainer", pb.PreStartContainerRequest, id="PreStartContainer"),
    pytest.param("ListAndWatch", pb.Empty, id="ListAndWatch"),
]


def parses(payload: bytes, message: type[Message]) -> bool:
    try:
        message.FromString(payload)
    except DecodeError:
        return False
    return True


async def raw_call(served: Served, name: str, payload: bytes) -> grpc.StatusCode:
    """Send ``payload`` as the request of ``name``; the status code of the answer."""
    method = METHOD.format(name)
    if name == "ListAndWatch":
        stream = served.channel.unary_stream(method, None, None)(payload, timeout=DEADLINE)
        answer = await outcome(stream.read())
        stream.cancel()
    else:
        answer = await outcome(
            served.channel.unary_unary(method, None, None)(payload, timeout=DEADLINE)
        )
    if isinstance(answer, grpc.aio.AioRpcError):
        assert answer.details(), "an error status carries a message"
        return answer.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize(("name", "message"), RPCS)
@FUZZ
@given(payload=st.binary(max_size=256))
async def test_raw_bytes(served: Served, name: str, message: type[Message], payload: bytes) -> None:
    """Bytes that may not parse: gRPC's own decoder refuses those (UNKNOWN, before any
    code of ours runs); bytes that parse are a request like any other."""
    code = await raw_call(served, name, payload)
    if parses(payload, message):
        assert code in {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}
    else:
        assert code == grpc.StatusCode.UNKNOWN
    await still_answers(served)


OVERSIZED = 5 * 1024 * 1024  # over gRPC's default 4 MiB receive limit
TOO_BIG = [
    pytest.param(
        "Allocate",
        pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devicesIDs=["x" * OVERSIZED])]
        ),
        id="Allocate",
    ),
    pytest.param(
        "GetPreferredAllocation",
        pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=["w1"] * (OVERSIZED // 4)
                )
            ]
        ),
        id="GetPreferredAllocation",
    ),
    pytest.param(
        "PreStartContainer",
        pb.PreStartContainerRequest(devicesIDs=["y" * OVERSIZED]),
        id="PreStartContainer",
    ),
]


@pytest.mark.parametrize(("name", "request_message"), TOO_BIG)
async def test_oversized_requests_are_refused(
    served: Served, name: str, request_message: pb.AllocateRequest
) -> None:
    call = served.channel.unary_unary(METHOD.format(name), None, None)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(request_message.SerializeToString(), timeout=DEADLINE)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    await still_answers(served)


async def test_thousands_of_bad_ids_are_refused_with_a_short_reason(served: Served) -> None:
    """The reason travels in a trailer, which gRPC clients drop beyond 8 KiB."""
    ids = [f"nope-{i}" for i in range(5_000)]
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devicesIDs=ids)])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await served.stub.Allocate(request, timeout=DEADLINE)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    reason = caught.value.details() or ""
    assert "'nope-0'" in reason
    assert "and 4992 more" in reason


async def test_the_server_answers_many_callers_at_once(served: Served) -> None:
    """A burst of concurrent bad and good calls: every one answered within its deadline."""
    good = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devicesIDs=["w0"])])
    bad = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devicesIDs=["nope"])])

    async def one(request: pb.AllocateRequest) -> grpc.StatusCode:
        try:
            await served.stub.Allocate(request, timeout=DEADLINE)
        except grpc.aio.AioRpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(one(good if i % 2 else bad) for i in range(200)))
    assert codes.count(grpc.StatusCode.OK) == 100
    assert codes.count(grpc.StatusCode.INVALID_ARGUMENT) == 100
