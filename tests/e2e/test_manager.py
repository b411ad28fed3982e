"""The manager against the kubelet emulator: real sockets, real registration."""

from __future__ import annotations

import asyncio
from pathlib import Path

from accel_plugins.errors import ConfigError
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.device import Device, DeviceNode, Health, tree
from tests.fixtures.framework import HookedBackend, LogWaiter, ScriptedBackend, StartManager

WIDGET = "example.com/widget"
GADGET = "example.com/gadget"


def widgets(n: int, *, numa: bool = True) -> list[Device]:
    return [
        Device(f"w{i}", numa_nodes=(i // 2,) if numa else (), nodes=(DeviceNode(f"/dev/w{i}"),))
        for i in range(n)
    ]


async def test_registers_with_the_kubelet(kubelet: Kubelet, start_manager: StartManager) -> None:
    await start_manager(ScriptedBackend(tree({WIDGET: widgets(2)})))
    view = await kubelet.wait_for_resource(WIDGET, allocatable=2)
    (registration,) = kubelet.registrations
    assert registration.version == "v1beta1"
    assert registration.resource_name == WIDGET
    assert registration.endpoint == "example.com_widget.sock"
    assert (kubelet.plugin_dir / registration.endpoint).is_socket()
    # Both widgets on NUMA node 0 and no backend policy: nothing to prefer.
    assert not registration.options.get_preferred_allocation_available
    assert not registration.options.pre_start_required
    assert view.healthy == ["w0", "w1"]
    assert {i: d.numa_nodes for i, d in view.devices.items()} == {"w0": (0,), "w1": (0,)}


async def test_health_change_reaches_the_kubelet(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    backend = ScriptedBackend(tree({WIDGET: widgets(3)}))
    await start_manager(backend)
    await kubelet.wait_for_resource(WIDGET, allocatable=3)

    sick = widgets(3)
    sick[1] = sick[1].with_health(Health.UNHEALTHY)
    backend.set(tree({WIDGET: sick}))
    view = await kubelet.wait_for_resource(WIDGET, allocatable=2)
    assert view.unhealthy == ["w1"]
    assert view.capacity == 3

    backend.set(tree({WIDGET: widgets(3)}))
    await kubelet.wait_for_resource(WIDGET, allocatable=3)


async def test_resources_appear_and_vanish(kubelet: Kubelet, start_manager: StartManager) -> None:
    backend = ScriptedBackend(tree({WIDGET: widgets(1)}))
    running = await start_manager(backend)
    await kubelet.wait_for_resource(WIDGET, allocatable=1)

    backend.set(tree({WIDGET: widgets(1), GADGET: [Device("g0")]}))
    await kubelet.wait_for_resource(GADGET, allocatable=1)
    gadget_socket = kubelet.plugin_dir / "example.com_gadget.sock"
    assert gadget_socket.is_socket()

    backend.set(tree({WIDGET: widgets(1)}))
    await kubelet.wait_for(lambda k: not k.resources[GADGET].connected)
    assert not gadget_socket.exists()
    assert set(running.manager.status()) == {WIDGET}


async def test_allocation_goes_through_preferred_allocation(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    # w0,w1 on NUMA 0; w2,w3 on NUMA 1. Take one from node 0 first so a
    # 2-device request can only stay on one node by picking node 1.
    await start_manager(ScriptedBackend(tree({WIDGET: widgets(4)})))
    await kubelet.wait_for_resource(WIDGET, allocatable=4)
    first = await kubelet.allocate("pod-a", "main", WIDGET, 1)
    assert first.device_ids == ("w0",)
    second = await kubelet.allocate("pod-b", "main", WIDGET, 2)
    assert sorted(second.device_ids) == ["w2", "w3"]
    assert sorted(d.host_path for d in second.response.devices) == ["/dev/w2", "/dev/w3"]


async def test_pre_start_container_is_called(kubelet: Kubelet, start_manager: StartManager) -> None:
    backend = HookedBackend(tree({WIDGET: widgets(2)}))
    await start_manager(backend)
    await kubelet.wait_for_resource(WIDGET, allocatable=2)
    assert kubelet.registrations[0].options.pre_start_required
    record = await kubelet.allocate("pod", "main", WIDGET, 1)
    assert backend.pre_started == [list(record.device_ids)]
    assert dict(record.response.envs) == {"HOOKED": record.device_ids[0]}


async def test_kubelet_restart_leads_to_reregistration(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    await start_manager(ScriptedBackend(tree({WIDGET: widgets(2)})))
    await kubelet.wait_for_resource(WIDGET, allocatable=2)
    record = await kubelet.allocate("pod", "main", WIDGET, 1)

    for restart in range(1, 4):
        await kubelet.restart()
        await kubelet.wait_for(lambda k, n=restart: len(k.registrations) == n + 1)  # type: ignore[misc]
        await kubelet.wait_for_resource(WIDGET, allocatable=2)
    # Allocations made before the restarts are still known to the kubelet.
    assert [r.device_ids for r in kubelet.allocations] == [record.device_ids]


async def test_own_socket_removed_leads_to_reserving(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    await start_manager(ScriptedBackend(tree({WIDGET: widgets(1)})))
    await kubelet.wait_for_resource(WIDGET, allocatable=1)
    socket = kubelet.plugin_dir / kubelet.registrations[0].endpoint
    socket.unlink()
    await kubelet.wait_for(lambda k: len(k.registrations) == 2)
    assert socket.is_socket()


async def test_kubelet_absent_at_start_then_appears(
    kubelet_dir: Path, start_manager: StartManager
) -> None:
    running = await start_manager(ScriptedBackend(tree({WIDGET: widgets(1)})))
    socket = kubelet_dir / "example.com_widget.sock"
    for _ in range(100):  # serving does not wait for the kubelet
        if socket.is_socket():
            break
        await asyncio.sleep(0.01)
    assert socket.is_socket()
    assert not running.manager.status()[WIDGET].registered

    async with Kubelet(kubelet_dir) as kubelet:
        await kubelet.wait_for_resource(WIDGET, allocatable=1)
        assert running.manager.status()[WIDGET].registered


async def test_reload_swaps_the_backend(kubelet: Kubelet, start_manager: StartManager) -> None:
    backends = iter(
        [
            ScriptedBackend(tree({WIDGET: widgets(1)})),
            HookedBackend(tree({WIDGET: widgets(3)})),
        ]
    )
    running = await start_manager(lambda: next(backends))
    await kubelet.wait_for_resource(WIDGET, allocatable=1)
    running.manager.reload()
    await kubelet.wait_for_resource(WIDGET, allocatable=3)
    # The new backend adds PreStartContainer: the kubelet must hear new options.
    await kubelet.wait_for(lambda k: k.resources[WIDGET].options.pre_start_required)


async def test_failed_reload_keeps_running_config(
    kubelet: Kubelet, start_manager: StartManager, logs: LogWaiter
) -> None:
    calls = 0

    def factory() -> ScriptedBackend:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise ConfigError("devices.yaml", "devices[0].name", "must not be empty")
        return ScriptedBackend(tree({WIDGET: widgets(2)}))

    running = await start_manager(factory)
    await kubelet.wait_for_resource(WIDGET, allocatable=2)
    running.manager.reload()
    message = await logs.wait_for("reload failed")
    assert "devices.yaml: devices[0].name: must not be empty" in message
    assert kubelet.resources[WIDGET].allocatable == 2


async def test_backend_crash_marks_devices_unhealthy_then_recovers(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    crash = asyncio.Event()
    built = 0

    class Flaky(ScriptedBackend):
        async def run(self, publish):  # type: ignore[no-untyped-def]
            publish(self.tree)
            if built == 1:
                await crash.wait()
                raise RuntimeError("hardware library fell over")
            await asyncio.Event().wait()

    def factory() -> Flaky:
        nonlocal built
        built += 1
        return Flaky(tree({WIDGET: widgets(2)}))

    await start_manager(factory, backend_restart_delay=0.05)
    await kubelet.wait_for_resource(WIDGET, allocatable=2)
    crash.set()
    await kubelet.wait_for(lambda k: built == 2 and k.resources[WIDGET].allocatable == 2)
    # In between, the kubelet was told the devices were unhealthy.
    assert kubelet.resources[WIDGET].updates >= 3


async def test_stop_removes_sockets(kubelet: Kubelet, start_manager: StartManager) -> None:
    running = await start_manager(ScriptedBackend(tree({WIDGET: widgets(1), GADGET: []})))
    await kubelet.wait_for_resource(WIDGET, allocatable=1)
    await kubelet.wait_for_resource(GADGET)
    await running.manager.stop()
    assert sorted(p.name for p in kubelet.plugin_dir.glob("*_*.sock")) == []
    await kubelet.wait_for(lambda k: not any(v.connected for v in k.resources.values()))
