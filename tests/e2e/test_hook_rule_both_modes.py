"""One backend error, the same answer and the same log line in both modes (issue 33).

Every backend call goes through the runtime's hook rule
(``accel_plugins.runtime.hooks``): a device plugin's Allocate and a DRA driver's
NodePrepareResources call the same ``allocate`` of the same backend, and what it
raises comes back worded the same. A device plugin answers with the gRPC status the
rule chose; the kubelet's DRA API has no status per claim (``NodePrepareResourceResponse``
carries an ``error`` string), so there the same message is the claim's error.
Both sides run for real: the DevicePlugin service and the DRA driver on unix sockets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import dra_v1_pb2 as v1
from accel_plugins.errors import AllocationError, HookError
from accel_plugins.plugin.device import ContainerAllocation, Device, tree
from accel_plugins.runtime.capabilities import Capabilities
from tests.fixtures.dra_plugin import FakeClaims, RunningDriver
from tests.fixtures.framework import ScriptedBackend, ServePlugin

RESOURCE = "example.com/card"
HOOK_TIMEOUT = 0.2
HOOKS_LOGGER = "accel_plugins.runtime.hooks"


class FailingAllocate(ScriptedBackend):
    """Two cards whose ``allocate`` fails as ``fault`` says."""

    def __init__(self, fault: Callable[[], object]) -> None:
        super().__init__(tree({RESOURCE: [Device("card0"), Device("card1")]}))
        self.fault = fault
        self.release = threading.Event()  # lets a hung hook's thread finish

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation:
        self.fault()
        return ContainerAllocation()


def raises(exc: Exception) -> Callable[[FailingAllocate], Callable[[], object]]:
    def fault() -> object:
        raise exc

    return lambda _backend: fault


@dataclass(frozen=True)
class Case:
    fault: Callable[[FailingAllocate], Callable[[], object]]
    status: grpc.StatusCode  # the device plugin's answer
    message: str  # in both answers
    logged: str | None  # the rule's log level, None for a refusal (the answer says it)


CASES = {
    "refusal (AllocationError)": Case(
        raises(AllocationError("card0 is being reset")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "card0 is being reset",
        None,
    ),
    "backend's own status (HookError)": Case(
        raises(HookError("firmware update in progress", code="UNAVAILABLE")),
        grpc.StatusCode.UNAVAILABLE,
        f"resource {RESOURCE}: firmware update in progress",
        "WARNING",
    ),
    "bug (any other exception)": Case(
        raises(KeyError("slot")),
        grpc.StatusCode.INTERNAL,
        f"resource {RESOURCE}: allocate failed: KeyError('slot')",
        "ERROR",
    ),
    "hang past the deadline": Case(
        lambda backend: lambda: backend.release.wait(10),
        grpc.StatusCode.DEADLINE_EXCEEDED,
        f"resource {RESOURCE}: allocate did not answer within {HOOK_TIMEOUT:g}s",
        "ERROR",
    ),
}


def rule_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == HOOKS_LOGGER]
    caplog.clear()
    return lines


async def device_plugin_answer(serve_plugin: ServePlugin, backend: FailingAllocate) -> Any:
    served = await serve_plugin(
        dict(backend.tree[RESOURCE]),
        Capabilities.of(backend, hook_timeout=HOOK_TIMEOUT),
        resource=RESOURCE,
    )
    request = pb.AllocateRequest(
        container_requests=[pb.ContainerAllocateRequest(devicesIDs=["card0"])]
    )
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await served.stub.Allocate(request, timeout=5)
    return failed.value


async def dra_answer(start_driver: Any, backend: FailingAllocate) -> str:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("card", "card0"))
    running: RunningDriver = await start_driver(backend, claims, hook_timeout=HOOK_TIMEOUT)
    request = v1.NodePrepareResourcesRequest(
        claims=[v1.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)]
    )
    response = await running.v1.NodePrepareResources(request, timeout=5)
    return response.claims[ref.uid].error


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_one_backend_error_is_answered_and_logged_alike_in_both_modes(
    serve_plugin: ServePlugin,
    start_driver: Any,
    caplog: pytest.LogCaptureFixture,
    case: Case,
) -> None:
    caplog.set_level(logging.DEBUG, logger=HOOKS_LOGGER)
    backend = FailingAllocate(lambda: None)
    backend.fault = case.fault(backend)
    try:
        failed = await device_plugin_answer(serve_plugin, backend)
        device_plugin_lines = rule_lines(caplog)
        claim_error = await dra_answer(start_driver, backend)
        dra_lines = rule_lines(caplog)
    finally:
        backend.release.set()
    assert failed.code() == case.status
    assert failed.details() == case.message
    assert claim_error == case.message
    assert device_plugin_lines == dra_lines
    assert [level for level, _ in dra_lines] == ([case.logged] if case.logged else [])
