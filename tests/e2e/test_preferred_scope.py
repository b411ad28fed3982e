"""GetPreferredAllocation is advertised only where there is something to prefer.

The kubelet calls it before every Allocate of a resource that advertises it;
for a resource whose devices are interchangeable that round trip buys nothing,
so such a resource registers without it and an admission costs one RPC.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from accel_plugins.deviceplugin.manager import Manager, ManagerSettings
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.device import Device, tree
from accel_plugins.runtime.capabilities import Capabilities
from accel_plugins.runtime.recorder import NoMetrics
from tests.fixtures.framework import HookedBackend, ScriptedBackend

WIDGET = "example.com/widget"


def on_numa(*nodes: int | None) -> list[Device]:
    return [Device(f"w{i}", numa_nodes=() if n is None else (n,)) for i, n in enumerate(nodes)]


class Scoped(ScriptedBackend):
    """A backend policy that says itself where it has a preference."""

    def __init__(self, answer: bool | Exception) -> None:
        super().__init__()
        self.answer = answer

    def preferred_allocation(
        self, resource: str, available: Sequence[Device], must: Sequence[Device], size: int
    ) -> Sequence[str]:
        return [d.id for d in available][:size]

    def has_preference(self, resource: str, devices: Collection[Device]) -> bool:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("capabilities", "devices", "advertised"),
    [
        pytest.param(Capabilities(), on_numa(0, 0, 0), False, id="default: one NUMA node"),
        pytest.param(Capabilities(), on_numa(None, None), False, id="default: no NUMA affinity"),
        pytest.param(Capabilities(), on_numa(0, 1), True, id="default: two NUMA nodes"),
        pytest.param(Capabilities(), on_numa(None, 1, 1), False, id="default: one known node"),
        pytest.param(Capabilities(), [], False, id="default: no devices"),
        pytest.param(
            Capabilities.of(HookedBackend()), on_numa(0), True, id="backend policy, no scope"
        ),
        pytest.param(Capabilities.of(Scoped(False)), on_numa(0, 1), False, id="scope says no"),
        pytest.param(Capabilities.of(Scoped(True)), on_numa(0), True, id="scope says yes"),
        pytest.param(
            Capabilities.of(Scoped(RuntimeError("bug"))),
            on_numa(0),
            True,
            id="scope raises: advertise (answering costs less than a wrong no)",
        ),
    ],
)
def test_which_resources_advertise_it(
    capabilities: Capabilities, devices: list[Device], advertised: bool
) -> None:
    assert capabilities.prefers(WIDGET, devices) is advertised


@dataclass
class Calls(NoMetrics):
    methods: list[str] = field(default_factory=list)

    def rpc_finished(self, method: str, resource: str, seconds: float) -> None:
        self.methods.append(method)


async def test_one_rpc_per_admission_then_advertised_once_it_matters(
    kubelet: Kubelet, kubelet_dir: Path
) -> None:
    calls = Calls()
    backend = ScriptedBackend(tree({WIDGET: on_numa(0, 0)}))
    manager = Manager(lambda: backend, ManagerSettings(plugin_dir=kubelet_dir), metrics=calls)
    task = asyncio.create_task(manager.run())
    try:
        await check_admissions(kubelet, backend, calls)
    finally:
        await manager.stop()
        await task


async def check_admissions(kubelet: Kubelet, backend: ScriptedBackend, calls: Calls) -> None:
    await kubelet.wait_for_resource(WIDGET, allocatable=2)
    assert not kubelet.resources[WIDGET].options.get_preferred_allocation_available

    calls.methods.clear()
    await kubelet.allocate("pod-a", "main", WIDGET, 1)
    assert calls.methods == ["Allocate"], "the kubelet asks no preference of a uniform resource"

    # A device on a second NUMA node gives the default policy a choice: the
    # plugin registers again with the new option.
    backend.set(tree({WIDGET: on_numa(0, 0, 1)}))
    await kubelet.wait_for(
        lambda k: (
            len(k.registrations) == 2
            and k.resources[WIDGET].options.get_preferred_allocation_available
            and k.resources[WIDGET].capacity == 3
        )
    )
    calls.methods.clear()
    await kubelet.allocate("pod-b", "main", WIDGET, 1)
    assert calls.methods == ["GetPreferredAllocation", "Allocate"]

    # It stays advertised when that device goes: no re-registration for a removal.
    backend.set(tree({WIDGET: on_numa(0, 0)}))
    await kubelet.wait_for(lambda k: k.resources[WIDGET].capacity == 2)
    assert len(kubelet.registrations) == 2
