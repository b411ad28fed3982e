"""Prepare and Unprepare counted and timed: the driver's real gRPC service on a real unix
socket, its series scraped from /metrics over real HTTP (as ``serve_dra`` wires them).

Names and outcomes: accel_plugins/dra/request_metrics.py (after the reference driver's
``prepare_claims_total``/``unprepare_claims_total`` and NVIDIA's ``requests_total``/
``request_duration_seconds``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.api import dra_v1_pb2_grpc as v1_grpc
from accel_plugins.api import dra_v1beta1_pb2 as v1beta1
from accel_plugins.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from accel_plugins.dra.claim_cdi import spec_file_name
from accel_plugins.dra.driver import DraDriver, DraSettings
from accel_plugins.dra.model import ClaimError, ClaimRef, ResolvedClaim
from accel_plugins.dra.request_metrics import Operation, RequestMetrics
from accel_plugins.metrics.server import MetricsServer
from accel_plugins.plugin.device import Device, tree
from tests.fixtures.dra_plugin import DRIVER, NODE, FakeClaims
from tests.fixtures.framework import ScriptedBackend
from tests.support.metrics import Samples, get, parse, promtool_check

REQUESTS = "accel_plugins_dra_requests_total"
CLAIMS = {
    "prepare": "accel_plugins_dra_prepare_claims_total",
    "unprepare": "accel_plugins_dra_unprepare_claims_total",
}
DURATION_COUNT = "accel_plugins_dra_request_duration_seconds_count"
OPERATIONS = ("prepare", "unprepare")
REQUEST_RESULTS = ("success", "claim_error", "grpc_error")
CLAIM_RESULTS = ("success", "error")


@dataclass
class Served:
    """A driver with its request metrics in a registry served on /metrics."""

    driver: DraDriver
    channel: grpc.aio.Channel
    url: str

    async def scrape(self) -> Samples:
        status, text = await asyncio.to_thread(get, self.url + "/metrics")
        assert status == 200, text
        return parse(text)

    async def text(self) -> str:
        return (await asyncio.to_thread(get, self.url + "/metrics"))[1]


@pytest.fixture
async def served(dra_root: Path) -> AsyncIterator[Callable[[FakeClaims], Any]]:
    """``await served(claims)``: a driver with request metrics, and /metrics on an
    ephemeral port; both stopped after."""
    stack = contextlib.AsyncExitStack()

    async def start(claims: FakeClaims) -> Served:
        settings = DraSettings(
            driver_name=DRIVER,
            node_name=NODE,
            kubelet_plugins_dir=dra_root / "plugins",
            plugins_registry_dir=dra_root / "plugins_registry",
            cdi_spec_dir=dra_root / "cdi",
        )
        registry = CollectorRegistry(auto_describe=False)
        backend = ScriptedBackend(tree({"example.com/card": [Device("card0"), Device("card1")]}))
        driver = DraDriver(
            lambda: backend, settings, claims, requests=RequestMetrics(DRIVER, registry)
        )
        task = asyncio.create_task(driver.run())

        async def stop_driver() -> None:
            driver.stop()
            await task

        stack.push_async_callback(stop_driver)
        await asyncio.wait_for(driver.ready.wait(), 5)

        async def problems() -> list[str]:
            return driver.problems()

        metrics = MetricsServer(registry, problems)
        host, port = await metrics.start("127.0.0.1", 0)
        stack.push_async_callback(metrics.stop)
        channel = grpc.aio.insecure_channel(f"unix://{settings.socket_path}")
        stack.push_async_callback(channel.close, None)
        return Served(driver, channel, f"http://{host}:{port}")

    async with stack:
        yield start


# -- the calls a case makes -----------------------------------------------------------

Call = tuple[str, str, Sequence[tuple[str, str, str]]]
"""(API version, operation, claims as (namespace, uid, name))."""


def claim(uid: str) -> tuple[str, str, str]:
    return ("default", uid, f"claim-{uid}")


async def make(served: Served, call: Call, timeout: float) -> None:
    version, operation, claims = call
    api, stubs = (v1, v1_grpc) if version == "v1" else (v1beta1, v1beta1_grpc)
    stub = stubs.DRAPluginStub(served.channel)
    message = [api.Claim(namespace=n, uid=u, name=c) for n, u, c in claims]
    if operation == "prepare":
        rpc, request = stub.NodePrepareResources, api.NodePrepareResourcesRequest
    else:
        rpc, request = stub.NodeUnprepareResources, api.NodeUnprepareResourcesRequest
    with contextlib.suppress(grpc.aio.AioRpcError):  # no answer: checked in the counts
        await rpc(request(claims=message), timeout=timeout)


def unremovable_spec(dra_root: Path, uid: str) -> None:
    """A claim whose CDI spec cannot be removed: a directory with its name (EISDIR)."""
    spec = dra_root / "cdi" / spec_file_name(DRIVER, uid)
    (spec / "inside").mkdir(parents=True)


@dataclass(frozen=True)
class Case:
    calls: Sequence[Call]
    requests: dict[tuple[str, str], int]  # (operation, result) -> count; others 0
    claims: dict[tuple[str, str], int]  # (operation, result) -> count; others 0
    setup: Callable[[Path], None] = lambda _root: None
    timeout: float = 5.0  # the kubelet's deadline for each call


class SlowClaims(FakeClaims):
    """The API server takes a while to answer for the claim ``slow``."""

    async def resolve(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim:
        if claim.uid == "slow":
            await asyncio.sleep(5)
        return await super().resolve(claim, driver, pool)


CASES = [
    pytest.param(
        Case(
            calls=[("v1", "prepare", [claim("good")])],
            requests={("prepare", "success"): 1},
            claims={("prepare", "success"): 1},
        ),
        id="prepare-one-claim",
    ),
    pytest.param(
        Case(
            calls=[("v1", "prepare", [claim("good"), claim("missing"), claim("other-node")])],
            requests={("prepare", "claim_error"): 1},
            claims={("prepare", "success"): 1, ("prepare", "error"): 2},
        ),
        id="prepare-some-claims-fail",
    ),
    pytest.param(
        Case(
            calls=[("v1", "prepare", [claim("good")])] * 2,
            requests={("prepare", "success"): 2},
            claims={("prepare", "success"): 2},
        ),
        id="prepare-repeated-is-counted-again",
    ),
    pytest.param(
        Case(
            calls=[("v1", "prepare", [])],
            requests={("prepare", "success"): 1},
            claims={},
        ),
        id="prepare-no-claims",
    ),
    pytest.param(
        Case(
            calls=[("v1", "prepare", [("default", "", "nameless-uid")])],
            requests={("prepare", "grpc_error"): 1},
            claims={},
        ),
        id="prepare-malformed-invalid-argument",
    ),
    pytest.param(
        Case(
            calls=[("v1", "prepare", [claim("slow")])],
            requests={("prepare", "grpc_error"): 1},
            claims={},
            timeout=0.3,
        ),
        id="prepare-cancelled-by-the-kubelets-deadline",
    ),
    pytest.param(
        Case(
            calls=[("v1beta1", "prepare", [claim("good"), claim("missing")])],
            requests={("prepare", "claim_error"): 1},
            claims={("prepare", "success"): 1, ("prepare", "error"): 1},
        ),
        id="v1beta1-counted-once",
    ),
    pytest.param(
        Case(
            calls=[
                ("v1", "prepare", [claim("good")]),
                ("v1", "unprepare", [claim("good"), claim("never-prepared")]),
            ],
            requests={("prepare", "success"): 1, ("unprepare", "success"): 1},
            claims={("prepare", "success"): 1, ("unprepare", "success"): 2},
        ),
        id="unprepare-done",
    ),
    pytest.param(
        Case(
            calls=[("v1", "unprepare", [claim("stuck"), claim("never-prepared")])],
            requests={("unprepare", "claim_error"): 1},
            claims={("unprepare", "success"): 1, ("unprepare", "error"): 1},
            setup=lambda root: unremovable_spec(root, "stuck"),
        ),
        id="unprepare-spec-cannot-be-removed",
    ),
    pytest.param(
        Case(
            calls=[("v1beta1", "unprepare", [claim("twice"), claim("twice")])],
            requests={("unprepare", "grpc_error"): 1},
            claims={},
        ),
        id="unprepare-malformed-invalid-argument",
    ),
]


@pytest.mark.parametrize("case", CASES)
async def test_prepare_and_unprepare_are_counted_by_result_and_timed(
    served: Any, dra_root: Path, case: Case
) -> None:
    claims = SlowClaims()
    claims.add("good", ("r", "card0"))
    claims.add("slow", ("r", "card1"))
    claims.fail("missing", ClaimError("resourceclaim default/claim-missing not found"))
    claims.add("other-node", ("r", "card9"))
    case.setup(dra_root)
    running: Served = await served(claims)
    before = await running.scrape()
    # Every series is there, at zero, before the first call.
    assert counts(before) == counts_of({}, {})

    for call in case.calls:
        await make(running, call, case.timeout)

    # A call the kubelet gave up on ends on our side a moment after its side.
    expected = counts_of(case.requests, case.claims)
    after = await running.scrape()
    for _ in range(100):
        if counts(after) == expected:
            break
        await asyncio.sleep(0.05)
        after = await running.scrape()
    assert counts(after) == expected
    for operation in OPERATIONS:
        made = sum(n for (op, _), n in case.requests.items() if op == operation)
        labels = (("driver", DRIVER), ("operation", operation))
        assert after[DURATION_COUNT, labels] == made, operation
    promtool_check(await running.text())


def counts(samples: Samples) -> dict[tuple[str, str, str], float]:
    """(family, operation, result) -> value of every request and claim counter."""
    found: dict[tuple[str, str, str], float] = {}
    for (name, labels), value in samples.items():
        named = dict(labels)
        if name == REQUESTS:
            assert named.pop("driver") == DRIVER
            found[name, named["operation"], named["result"]] = value
        for operation, family in CLAIMS.items():
            if name == family:
                assert named.pop("driver") == DRIVER
                found[name, operation, named["result"]] = value
    return found


def counts_of(
    requests: dict[tuple[str, str], int], claims: dict[tuple[str, str], int]
) -> dict[tuple[str, str, str], float]:
    """What :func:`counts` should read: the given counts, every other series 0."""
    expected: dict[tuple[str, str, str], float] = {}
    for operation in OPERATIONS:
        for result in REQUEST_RESULTS:
            expected[REQUESTS, operation, result] = requests.get((operation, result), 0)
        for result in CLAIM_RESULTS:
            expected[CLAIMS[operation], operation, result] = claims.get((operation, result), 0)
    return expected


def test_the_histogram_observes_every_call_with_its_seconds() -> None:
    registry = CollectorRegistry(auto_describe=False)
    metrics = RequestMetrics("d.example.com", registry)
    metrics.observe(Operation.PREPARE, 0.003, [""])
    labels = {"driver": "d.example.com", "operation": "prepare"}
    name = "accel_plugins_dra_request_duration_seconds"
    assert registry.get_sample_value(f"{name}_count", labels) == 1
    assert registry.get_sample_value(f"{name}_sum", labels) == pytest.approx(0.003)
    assert registry.get_sample_value(f"{name}_bucket", {**labels, "le": "0.0025"}) == 0
    assert registry.get_sample_value(f"{name}_bucket", {**labels, "le": "0.005"}) == 1
