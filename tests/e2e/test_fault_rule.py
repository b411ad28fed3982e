"""One fault rule for vendor code (the "Writing a backend" guide states it).

Every hook runs off the event loop with a deadline; what it raises becomes a
gRPC status with a message and the resource keeps serving. A backend whose
``run()`` crashes or returns, or whose factory raises, is rebuilt with backoff
and counted. An invalid resource name or device ID stops the manager with a
ConfigError (the CLI's exit 2). Snapshots are diffed by content.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.api import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.errors import AllocationError, HookError, InvalidSnapshotError
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.backend import Publish
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceTree, Health, tree
from accel_plugins.runtime.capabilities import Capabilities
from accel_plugins.runtime.recorder import NoMetrics
from tests.fixtures.framework import ScriptedBackend, ServePlugin, StartManager

WIDGET = "example.com/widget"
GADGET = "example.com/gadget"
DEVICES = {f"w{i}": Device(f"w{i}") for i in range(4)}
HOOK_TIMEOUT = 0.2


class Faulty:
    """A backend whose three hooks all fail the same way: ``fault`` decides how."""

    def __init__(self, fault: Callable[[], object]) -> None:
        self.fault = fault
        self.release = threading.Event()  # lets a hung hook's thread finish

    async def run(self, publish: Publish) -> None:
        await asyncio.Event().wait()

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation:
        self.fault()
        return ContainerAllocation()

    def preferred_allocation(
        self, resource: str, available: Sequence[Device], must: Sequence[Device], size: int
    ) -> Sequence[str]:
        self.fault()
        return [d.id for d in available][:size]

    def pre_start(self, resource: str, devices: Sequence[Device]) -> None:
        self.fault()


def raises(exc: Exception) -> Callable[[], object]:
    def fault() -> object:
        raise exc

    return fault


@dataclass(frozen=True)
class Case:
    fault: Callable[[Faulty], Callable[[], object]]
    # Expected status per hook: Allocate, GetPreferredAllocation, PreStartContainer.
    codes: tuple[grpc.StatusCode, grpc.StatusCode, grpc.StatusCode]
    message: str


S = grpc.StatusCode
CASES = {
    "refusal (AllocationError)": Case(
        lambda b: raises(AllocationError("w1 is being reset")),
        (S.INVALID_ARGUMENT, S.INVALID_ARGUMENT, S.FAILED_PRECONDITION),
        "w1 is being reset",
    ),
    "backend's own status (HookError)": Case(
        lambda b: raises(HookError("firmware update in progress", code="UNAVAILABLE")),
        (S.UNAVAILABLE, S.UNAVAILABLE, S.UNAVAILABLE),
        "firmware update in progress",
    ),
    "bug (any other exception)": Case(
        lambda b: raises(KeyError("slot")),
        (S.INTERNAL, S.INTERNAL, S.INTERNAL),
        "KeyError('slot')",
    ),
    "hang past the deadline": Case(
        lambda b: lambda: b.release.wait(10),
        (S.DEADLINE_EXCEEDED, S.DEADLINE_EXCEEDED, S.DEADLINE_EXCEEDED),
        f"did not answer within {HOOK_TIMEOUT:g}s",
    ),
}


async def call_hook(stub: pb_grpc.DevicePluginAsyncStub, hook: int) -> None:
    if hook == 0:
        await stub.Allocate(
            pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devicesIDs=["w1"])])
        )
    elif hook == 1:
        container = pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=list(DEVICES), allocation_size=1
        )
        await stub.GetPreferredAllocation(
            pb.PreferredAllocationRequest(container_requests=[container])
        )
    else:
        await stub.PreStartContainer(pb.PreStartContainerRequest(devicesIDs=["w1"]))


async def first_devices(stream: Any) -> Sequence[pb.Device]:
    message = await stream.read()
    assert isinstance(message, pb.ListAndWatchResponse)
    return message.devices


@pytest.mark.parametrize("hook", [0, 1, 2], ids=["allocate", "preferred", "pre_start"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_a_failing_hook_becomes_a_status_and_the_resource_keeps_serving(
    serve_plugin: ServePlugin, case: Case, hook: int
) -> None:
    backend = Faulty(lambda: None)
    backend.fault = case.fault(backend)
    served = await serve_plugin(
        DEVICES, Capabilities.of(backend, hook_timeout=HOOK_TIMEOUT), resource=WIDGET
    )
    stream = served.stub.ListAndWatch(pb.Empty())
    assert len(await first_devices(stream)) == 4
    try:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await call_hook(served.stub, hook)
        assert failed.value.code() == case.codes[hook]
        assert case.message in (failed.value.details() or "")
        # Still serving: health changes stream, and a healthy hook answers.
        served.servicer.update({**DEVICES, "w0": Device("w0", Health.UNHEALTHY)})
        assert (await first_devices(stream))[0].health == "Unhealthy"
        backend.fault = lambda: None
        await call_hook(served.stub, hook)
    finally:
        backend.release.set()
        stream.cancel()


async def test_a_hook_runs_off_the_event_loop(serve_plugin: ServePlugin) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []
    backend = Faulty(lambda: seen.append(threading.get_ident()))
    served = await serve_plugin(DEVICES, Capabilities.of(backend), resource=WIDGET)
    for hook in range(3):
        await call_hook(served.stub, hook)
    assert len(seen) == 3
    assert loop_thread not in seen


class Restarts(NoMetrics):
    def __init__(self) -> None:
        self.count = 0

    def backend_restarted(self) -> None:
        self.count += 1


async def test_a_run_that_returns_is_restarted_with_backoff_and_counted(
    kubelet: Kubelet, kubelet_dir: Path
) -> None:
    starts: list[float] = []

    class Quitter(ScriptedBackend):
        async def run(self, publish: Publish) -> None:
            starts.append(asyncio.get_running_loop().time())
            publish(self.tree)  # and return at once: a bug, not a stop

    metrics = Restarts()
    settings = ManagerSettings(
        plugin_dir=kubelet_dir, backend_restart_delay=0.05, backend_restart_max=0.2
    )
    manager = Manager(
        lambda: Quitter(tree({WIDGET: list(DEVICES.values())})), settings, metrics=metrics
    )
    task = asyncio.create_task(manager.run())
    try:
        await kubelet.wait_for(lambda k: len(starts) >= 5, timeout=10)
    finally:
        await manager.stop()
    await task
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # 0.05, 0.1, 0.2, 0.2: doubling up to the maximum, never a busy loop.
    for gap, delay in zip(gaps, (0.05, 0.1, 0.2, 0.2), strict=False):
        assert gap >= delay * 0.9
    assert metrics.count >= 4
    # Meanwhile the kubelet saw the devices Unhealthy rather than a promise nobody keeps.
    assert kubelet.resources[WIDGET].updates >= 2


async def test_a_factory_that_raises_is_retried_not_fatal(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    attempts = 0

    def factory() -> ScriptedBackend:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise OSError("the card's driver is still loading")
        return ScriptedBackend(tree({WIDGET: list(DEVICES.values())}))

    await start_manager(factory, backend_restart_delay=0.02)
    await kubelet.wait_for_resource(WIDGET, allocatable=4)
    assert attempts == 3


@pytest.mark.parametrize(
    ("published", "field", "reason"),
    [
        pytest.param(
            {"widget": [Device("w0")]},
            "resource 'widget'",
            "no domain prefix",
            id="resource without a domain",
        ),
        pytest.param(
            {"example.com/Wid get": [Device("w0")]},
            "resource 'example.com/Wid get'",
            "name part must consist of",
            id="resource with a space",
        ),
        pytest.param(
            {WIDGET: [Device("w 0")]},
            "device 'w 0'",
            "no whitespace or control characters",
            id="device ID with a space",
        ),
        pytest.param(
            {WIDGET: [Device("w0\n")]},
            "device 'w0\\n'",
            "no whitespace or control characters",
            id="device ID with a newline",
        ),
    ],
)
async def test_an_invalid_name_stops_the_manager_with_a_config_error(
    kubelet: Kubelet,
    kubelet_dir: Path,
    published: dict[str, list[Device]],
    field: str,
    reason: str,
) -> None:
    manager = Manager(lambda: ScriptedBackend(tree(published)), ManagerSettings(kubelet_dir))
    with pytest.raises(InvalidSnapshotError) as stopped:
        await asyncio.wait_for(manager.run(), 10)
    assert field in str(stopped.value)
    assert reason in str(stopped.value)
    assert kubelet.registrations == []
    assert list(kubelet_dir.glob("*_*.sock")) == []


async def test_an_invalid_id_in_a_later_snapshot_also_stops_it(
    kubelet: Kubelet, kubelet_dir: Path
) -> None:
    backend = ScriptedBackend(tree({WIDGET: [Device("w0")]}))
    manager = Manager(lambda: backend, ManagerSettings(kubelet_dir))
    task = asyncio.create_task(manager.run())
    await kubelet.wait_for_resource(WIDGET, allocatable=1)
    backend.set(tree({WIDGET: [Device("w0"), Device("w\t1")]}))
    with pytest.raises(InvalidSnapshotError, match="device 'w\\\\t1'"):
        await asyncio.wait_for(task, 10)
    assert list(kubelet_dir.glob("*_*.sock")) == []


async def test_snapshots_are_diffed_by_content(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    def snapshot(unhealthy: str = "") -> DeviceTree:
        # Fresh objects every time, as a rescan builds them.
        return tree(
            {
                WIDGET: [
                    Device(i, Health.UNHEALTHY if i == unhealthy else Health.HEALTHY)
                    for i in DEVICES
                ],
                GADGET: [Device("g0"), Device("g1")],
            }
        )

    backend = ScriptedBackend(snapshot())
    await start_manager(backend)
    await kubelet.wait_for_resource(WIDGET, allocatable=4)
    await kubelet.wait_for_resource(GADGET, allocatable=2)
    before = {r: v.updates for r, v in kubelet.resources.items()}

    for _ in range(5):
        backend.set(snapshot())  # equal content: nothing to send
    backend.set(snapshot(unhealthy="w2"))  # one device changes
    await kubelet.wait_for(lambda k: k.resources[WIDGET].allocatable == 3)
    # A marker change on the other resource proves every earlier snapshot was applied.
    backend.set({**snapshot(unhealthy="w2"), GADGET: {"g0": Device("g0")}})
    await kubelet.wait_for(lambda k: k.resources[GADGET].capacity == 1)

    after = {r: v.updates for r, v in kubelet.resources.items()}
    assert after[WIDGET] - before[WIDGET] == 1, "one ListAndWatch message for one changed device"
    assert after[GADGET] - before[GADGET] == 1, "only the marker change reached the gadgets"
