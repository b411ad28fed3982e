"""The kubelet refuses the plugin's registration: a wrong API version, a resource name taken.

The plugin says why once, loudly (then quietly at debug level), keeps serving,
retries on an exponential backoff (never sooner than the schedule says, so no
busy loop) and is registered at the first attempt after the kubelet relents.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.kubelet_emulator import Kubelet, names
from accel_plugins.kubelet_emulator.client import unix_target
from accel_plugins.kubelet_emulator.registration import (
    RegistrationRefusedError,
    RegistrationServicer,
)
from accel_plugins.plugin.device import Device, tree
from tests.fixtures.framework import ScriptedBackend, StartManager

WIDGET = "example.com/widget"
INITIAL, MAXIMUM = 0.05, 0.4
ATTEMPTS = 6  # 0, 0.05, 0.15, 0.35, 0.75, 1.15 s: the backoff reaches its maximum


def backend() -> ScriptedBackend:
    return ScriptedBackend(tree({WIDGET: [Device("w0"), Device("w1")]}))


def assert_backs_off(attempts: list[float]) -> None:
    """Each retry waits at least its backoff delay: 0.05, 0.1, 0.2, 0.4, 0.4, ..."""
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    delays = [min(INITIAL * 2**i, MAXIMUM) for i in range(len(gaps))]
    for n, (gap, delay) in enumerate(zip(gaps, delays, strict=True), start=1):
        assert gap >= delay * 0.95, f"retry {n} came after {gap:.3f}s, its backoff is {delay}s"
    window = attempts[-1] - attempts[0]
    assert len(attempts) <= 1 + window / INITIAL, "more attempts than any backoff allows"


def assert_said_once(caplog: pytest.LogCaptureFixture, reason: str) -> None:
    failures = [r for r in caplog.records if "registration failed" in r.getMessage()]
    assert len(failures) >= ATTEMPTS - 1
    first, *rest = failures
    assert first.levelno == logging.WARNING
    assert reason in first.getMessage()
    assert WIDGET in first.getMessage()
    assert all(r.levelno == logging.DEBUG for r in rest), "only the first failure is loud"


async def test_wrong_api_version(
    kubelet: Kubelet,
    start_manager: StartManager,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="accel_plugins")
    # A kubelet from a future where v1beta1 is gone.
    monkeypatch.setattr(names, "SUPPORTED_VERSIONS", ("v1",))
    running = await start_manager(backend(), backoff_initial=INITIAL, backoff_max=MAXIMUM)
    await kubelet.wait_for(lambda k: len(k.rejections) >= ATTEMPTS, timeout=10)

    assert {r.code for r in kubelet.rejections} == {grpc.StatusCode.INVALID_ARGUMENT}
    assert_backs_off([r.at for r in kubelet.rejections])
    assert_said_once(caplog, "API version 'v1beta1' is not supported; supported versions: v1")
    assert running.manager.status()[WIDGET].serving  # refused, still serving

    monkeypatch.setattr(names, "SUPPORTED_VERSIONS", ("v1beta1",))
    await kubelet.wait_for_resource(WIDGET, allocatable=2, timeout=MAXIMUM + 5)
    assert len(kubelet.registrations) == 1


class Registrar:
    """The kubelet's Registration service, refusing with one status until ``relent()``."""

    def __init__(self, socket: Path, code: grpc.StatusCode, reason: str) -> None:
        self.socket = socket
        self.code = code
        self.reason = reason
        self.attempts: list[float] = []
        self.accepted: list[pb.RegisterRequest] = []
        self._refusing = True
        self._changed = asyncio.Event()
        self._server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(RegistrationServicer(self._handle), self._server)

    async def start(self) -> None:
        self._server.add_insecure_port(unix_target(self.socket))
        await self._server.start()

    async def stop(self) -> None:
        await self._server.stop(None)

    def relent(self) -> None:
        self._refusing = False

    async def _handle(self, request: pb.RegisterRequest) -> None:
        self.attempts.append(time.monotonic())
        self._changed.set()
        if self._refusing:
            raise RegistrationRefusedError(self.code, self.reason)
        self.accepted.append(request)

    async def wait_for(self, attempts: int, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.attempts) < attempts:
                self._changed.clear()
                await self._changed.wait()


NAME_TAKEN = f"resource {WIDGET} is already registered by another plugin"


@pytest.fixture
async def registrar(kubelet_dir: Path) -> AsyncIterator[Registrar]:
    server = Registrar(kubelet_dir / "kubelet.sock", grpc.StatusCode.ALREADY_EXISTS, NAME_TAKEN)
    await server.start()
    yield server
    await server.stop()


async def test_resource_name_taken(
    registrar: Registrar, start_manager: StartManager, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="accel_plugins")
    running = await start_manager(backend(), backoff_initial=INITIAL, backoff_max=MAXIMUM)
    await registrar.wait_for(ATTEMPTS)

    assert_backs_off(registrar.attempts)
    assert_said_once(caplog, f"ALREADY_EXISTS: {NAME_TAKEN}")
    assert running.manager.status()[WIDGET].serving

    registrar.relent()
    refused = len(registrar.attempts)
    await registrar.wait_for(refused + 1, timeout=MAXIMUM + 5)
    (request,) = registrar.accepted
    assert (request.version, request.resource_name) == ("v1beta1", WIDGET)
