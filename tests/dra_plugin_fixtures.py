"""Fixtures for the DRA kubelet side: an in-memory ClaimSource and a running DraDriver.

The ClaimSource is the API boundary (the API side tests the real one against a
real API server); everything from there to the kubelet is real here: the
driver's gRPC services on real unix sockets, real protobuf messages.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from accel_plugins.api import dra_health_v1_pb2_grpc as health_v1_grpc
from accel_plugins.api import dra_health_v1alpha1_pb2_grpc as health_grpc
from accel_plugins.api import dra_v1_pb2_grpc as v1_grpc
from accel_plugins.api import dra_v1beta1_pb2_grpc as v1beta1_grpc
from accel_plugins.api import pluginregistration_v1_pb2_grpc as reg_grpc
from accel_plugins.dra.driver import DraDriver, DraSettings
from accel_plugins.dra.model import AllocatedDevice, ClaimError, ClaimRef, ResolvedClaim
from accel_plugins.plugin.backend import Backend, Publish
from accel_plugins.plugin.cdi import CdiDevice, CdiSpec, CdiSpecWriter, ContainerEdits
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceTree
from accel_plugins.testing import short_tempdir
from tests.framework_fixtures import ScriptedBackend

DRIVER = "accel.example.com"
NODE = "node-a"


@dataclass
class FakeClaims:
    """Claims by UID as the API server would return them; records every resolve."""

    claims: dict[str, ResolvedClaim | Exception] = field(default_factory=dict)
    calls: list[ClaimRef] = field(default_factory=list)

    def add(
        self, uid: str, *devices: tuple[str, str], name: str = "", pods: tuple[str, ...] = ()
    ) -> ClaimRef:
        """A claim allocated ``(request, device)`` pairs of our driver on our node, reserved
        for ``pods``."""
        ref = ClaimRef(uid=uid, namespace="default", name=name or f"claim-{uid}")
        self.claims[uid] = ResolvedClaim(
            ref, tuple(AllocatedDevice(r, DRIVER, NODE, d) for r, d in devices), consumers=pods
        )
        return ref

    def fail(self, uid: str, error: Exception) -> ClaimRef:
        ref = ClaimRef(uid=uid, namespace="default", name=f"claim-{uid}")
        self.claims[uid] = error
        return ref

    async def resolve(self, claim: ClaimRef, driver: str, pool: str) -> ResolvedClaim:
        self.calls.append(claim)
        assert (driver, pool) == (DRIVER, NODE)
        found = self.claims.get(claim.uid)
        if found is None:
            raise ClaimError(f"resourceclaim {claim.namespace}/{claim.name} not found")
        if isinstance(found, Exception):
            raise found
        return found


class SpecKeepingBackend(ScriptedBackend):
    """A CDI device-list strategy in small: its answers name ``vendor.example.com/card=all``
    of its own spec, written when it starts and kept by the framework's CdiSpecWriter (as
    the NVIDIA and generic backends keep theirs)."""

    KIND = "vendor.example.com/card"
    NAME = f"{KIND}=all"

    def __init__(self, tree: DeviceTree, spec_dir: Path) -> None:
        super().__init__(tree)
        self.writer = CdiSpecWriter(spec_dir)
        self.ensured = 0

    async def run(self, publish: Publish) -> None:
        edits = ContainerEdits(env=("CARDS=all",))
        self.writer.sync([CdiSpec(self.KIND, (CdiDevice("all", edits),))])
        await super().run(publish)

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation:
        return ContainerAllocation(
            envs={"VISIBLE": ",".join(d.id for d in devices)}, cdi_devices=(self.NAME,)
        )

    @property
    def keeps_cdi_specs(self) -> bool:
        return True

    def ensure_cdi_specs(self, resource: str) -> None:
        self.ensured += 1
        self.writer.restore()


@dataclass
class RunningDriver:
    driver: DraDriver
    task: asyncio.Task[None]
    channel: grpc.aio.Channel

    @property
    def settings(self) -> DraSettings:
        return self.driver.settings

    @property
    def v1(self) -> v1_grpc.DRAPluginAsyncStub:
        return v1_grpc.DRAPluginStub(self.channel)

    @property
    def v1beta1(self) -> v1beta1_grpc.DRAPluginAsyncStub:
        return v1beta1_grpc.DRAPluginStub(self.channel)

    @property
    def health(self) -> health_grpc.DRAResourceHealthAsyncStub:
        return health_grpc.DRAResourceHealthStub(self.channel)

    @property
    def health_v1(self) -> health_v1_grpc.DRAResourceHealthAsyncStub:
        return health_v1_grpc.DRAResourceHealthStub(self.channel)

    def registration(self, channel: grpc.aio.Channel) -> reg_grpc.RegistrationAsyncStub:
        return reg_grpc.RegistrationStub(channel)

    async def stop(self) -> None:
        await self.channel.close(None)
        self.driver.stop()
        await self.task


@pytest.fixture
def dra_root() -> Iterator[Path]:
    with short_tempdir("dra-") as path:
        yield path


@pytest.fixture
async def start_driver(dra_root: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await start_driver(backend, claims, **settings)``: a served driver, stopped after."""
    running: list[RunningDriver] = []

    async def start(backend: Backend, claims: FakeClaims, **overrides: Any) -> RunningDriver:
        paths: dict[str, Any] = {
            "kubelet_plugins_dir": dra_root / "plugins",
            "plugins_registry_dir": dra_root / "plugins_registry",
            "cdi_spec_dir": dra_root / "cdi",
        }
        settings = DraSettings(driver_name=DRIVER, node_name=NODE, **(paths | overrides))
        driver = DraDriver(lambda: backend, settings, claims)
        task = asyncio.create_task(driver.run())
        await asyncio.wait_for(driver.ready.wait(), 5)
        channel = grpc.aio.insecure_channel(f"unix://{settings.socket_path}")
        handle = RunningDriver(driver, task, channel)
        running.append(handle)
        return handle

    yield start
    for handle in running:
        if not handle.task.done():
            with contextlib.suppress(Exception):
                await handle.stop()
