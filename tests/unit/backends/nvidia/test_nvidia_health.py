"""XID filtering, fault -> Unhealthy -> recovery, GPU lost, MIG and replica health."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from accel_plugins.backends.nvidia.config.config import (
    ReplicaDevices,
    ReplicatedResource,
    TimeSlicing,
)
from accel_plugins.backends.nvidia.health import XidPolicy
from accel_plugins.plugin.device import DeviceTree
from tests.fixtures.framework import LogWaiter, TreeRecorder
from tests.fixtures.nvidia import RunNvidia, simulated_backend, watching

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("disable", "enable", "xid", "critical"),
    [
        pytest.param("", "", 79, True, id="hardware-xid-counts"),
        pytest.param("", "", 48, True, id="double-bit-ecc-counts"),
        *(
            pytest.param("", "", x, False, id=f"application-xid-{x}-ignored")
            for x in (13, 31, 43, 45, 68, 109)
        ),
        pytest.param("48", "", 48, False, id="disable-adds-to-ignored"),
        pytest.param("48, 62", "", 62, False, id="disable-list-with-spaces"),
        pytest.param("48,junk", "", 48, False, id="junk-is-skipped"),
        pytest.param("48", "", 79, True, id="disable-list-leaves-others"),
        pytest.param("all", "", 79, False, id="disable-all"),
        pytest.param("xids", "", 79, False, id="disable-xids"),
        pytest.param("ALL", "", 79, False, id="disable-all-upper-case"),
        pytest.param("", "13", 13, True, id="enable-a-default-ignored"),
        pytest.param("13", "13", 13, True, id="enable-wins-over-disable"),
        pytest.param("", "all", 31, True, id="enable-all"),
        pytest.param("all", "79", 79, True, id="disable-all-enable-one"),
        pytest.param("all", "79", 48, False, id="disable-all-enable-one-others-off"),
    ],
)
def test_xid_policy(disable: str, enable: str, xid: int, critical: bool) -> None:
    assert XidPolicy.from_env(disable, enable).is_critical(xid) is critical


@pytest.mark.parametrize(
    ("disable", "enable", "watching"),
    [
        pytest.param("", "", True, id="default"),
        pytest.param("all", "", False, id="all-off"),
        pytest.param("all", "79", True, id="all-off-but-one"),
        pytest.param("48", "", True, id="some-off"),
    ],
)
def test_policy_says_whether_a_thread_is_needed(disable: str, enable: str, watching: bool) -> None:
    assert XidPolicy.from_env(disable, enable).watching is watching


def health_of(tree: DeviceTree, resource: str = GPU) -> list[str]:
    """Health of each device of ``resource`` in discovery order, as short letters."""
    return ["H" if d.healthy else "U" for d in tree[resource].values()]


def first_unhealthy(resource: str = GPU) -> Any:
    return lambda tree: "U" in health_of(tree, resource)


async def test_first_tree_is_complete_and_healthy(run_nvidia: RunNvidia) -> None:
    backend, _ = simulated_backend("dgx-h100")
    recorder = await run_nvidia(backend)
    assert health_of(recorder.trees[0]) == ["H"] * 8
    assert list(recorder.trees[0]) == [GPU]


async def test_critical_xid_marks_only_that_gpu(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("pcie-4gpu")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(2, 79)
    tree = await recorder.wait_for(first_unhealthy())
    assert health_of(tree) == ["H", "H", "U", "H"]


async def test_ignored_xids_change_nothing(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("pcie-4gpu", disable="48")
    recorder = await run_nvidia(backend)
    await watching(backend)
    for xid in (13, 31, 43, 45, 68, 109, 48):
        nvml.inject_xid(0, xid)
    nvml.inject_xid(3, 79)  # events are handled in order: this one comes last
    await recorder.wait_for(first_unhealthy())
    assert all(health_of(t)[0] == "H" for t in recorder.trees)
    assert health_of(recorder.latest) == ["H", "H", "H", "U"]


async def test_fault_then_recovery_after_a_quiet_period(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("pcie-4gpu", recovery=0.05)
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(1, 79)
    await recorder.wait_for(first_unhealthy())
    await recorder.wait_for(lambda t: health_of(t) == ["H"] * 4)
    assert [health_of(t)[1] for t in recorder.trees] == ["H", "U", "H"]


async def test_recovery_disabled_keeps_the_device_unhealthy(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("pcie-4gpu", recovery=0)
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(1, 79)
    await recorder.wait_for(first_unhealthy())
    assert backend.monitor is not None
    assert backend.monitor.pending_recoveries == []
    assert set(backend.monitor.faults) == {nvml.profile.gpus[1].uuid}


async def test_lost_gpu_stays_unhealthy_until_it_answers_again(
    run_nvidia: RunNvidia, logs: LogWaiter
) -> None:
    backend, nvml = simulated_backend("pcie-4gpu", recovery=0.05)
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.lose_gpu(2)
    tree = await recorder.wait_for(first_unhealthy())
    assert health_of(tree) == ["H", "H", "U", "H"]
    await logs.wait_for("still fails its probe")
    assert health_of(recorder.latest) == ["H", "H", "U", "H"]
    await logs.wait_for("NVML reports a lost GPU")
    nvml.restore_gpu(2)
    await recorder.wait_for(lambda t: health_of(t) == ["H"] * 4)


async def test_scripted_events_from_the_profile(run_nvidia: RunNvidia) -> None:
    node = {
        "gpus": [{"name": "G", "memoryMiB": 1024} for _ in range(3)],
        "events": [{"at": 0, "gpu": 1, "xid": 79}, {"at": 0, "gpu": 2, "xid": 13}],
    }
    backend, _ = simulated_backend(node)
    recorder = await run_nvidia(backend)
    tree = await recorder.wait_for(first_unhealthy())
    assert health_of(tree) == ["H", "U", "H"]


async def test_disabled_health_checks_open_no_event_set(
    run_nvidia: RunNvidia, logs: LogWaiter
) -> None:
    backend, nvml = simulated_backend("pcie-4gpu", disable="all")
    await run_nvidia(backend)
    await logs.wait_for("XID health checks are disabled")
    assert nvml.event_sets == 0


async def test_mig_event_marks_that_mig_device_only(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("a100-mig", mig_strategy="mixed")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(0, 94, mig=3)  # GPU 0's second 1g.5gb
    tree = await recorder.wait_for(first_unhealthy("nvidia.com/mig-1g.5gb"))
    assert health_of(tree, "nvidia.com/mig-1g.5gb") == ["H", "U"] + ["H"] * 7
    assert health_of(tree, "nvidia.com/mig-3g.20gb") == ["H"]


async def test_whole_gpu_event_marks_all_its_mig_devices(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("a100-mig", mig_strategy="mixed")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(1, 79)
    tree = await recorder.wait_for(first_unhealthy("nvidia.com/mig-1g.5gb"))
    assert health_of(tree, "nvidia.com/mig-1g.5gb") == ["H", "H"] + ["U"] * 7
    assert health_of(tree) == ["H"]  # GPU 3, the full GPU


async def test_mig_fault_makes_the_whole_gpu_unhealthy_under_none(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("a100-mig", mig_strategy="none")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(0, 94, mig=1)
    tree = await recorder.wait_for(first_unhealthy())
    assert health_of(tree) == ["U", "H", "H", "H"]


async def test_replicas_share_their_gpus_health(run_nvidia: RunNvidia) -> None:
    shared = TimeSlicing(
        resources=(ReplicatedResource(GPU, GPU, ReplicaDevices(all=True), 2, "test"),)
    )
    backend, nvml = simulated_backend("pcie-4gpu", sharing=shared)
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(1, 79)
    tree = await recorder.wait_for(first_unhealthy())
    assert health_of(tree) == ["H", "H", "U", "U", "H", "H", "H", "H"]


async def test_nvml_is_shut_down_when_the_backend_stops() -> None:
    backend, nvml = simulated_backend("pcie-4gpu")
    recorder = TreeRecorder()
    task = asyncio.create_task(backend.run(recorder))
    await recorder.wait_for(lambda _: True)
    await watching(backend)
    assert (nvml.initialized, nvml.event_sets) == (True, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)
    assert (nvml.initialized, nvml.event_sets) == (False, 0)


# -- reasons ---------------------------------------------------------------------------


def reasons_of(tree: DeviceTree, resource: str = GPU) -> list[str]:
    return [str(d.reason) if d.reason else "" for d in tree[resource].values()]


async def test_an_xid_gives_its_number_and_meaning(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("pcie-4gpu")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(2, 48)
    tree = await recorder.wait_for(first_unhealthy())
    assert reasons_of(tree) == ["", "", "xid 48: Double Bit ECC Error", ""]


async def test_a_lost_gpu_is_gpu_lost_and_its_reason_clears_on_recovery(
    run_nvidia: RunNvidia,
) -> None:
    # XID 79 ignored: the lost GPU is seen through NVML's GPU-is-lost alone (the simulated
    # NVML, like the driver, reports XID 79 first, which would otherwise be the reason).
    backend, nvml = simulated_backend("pcie-4gpu", recovery=0.05, disable="79")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.lose_gpu(1)
    tree = await recorder.wait_for(first_unhealthy())
    reason = tree[GPU][nvml.profile.gpus[1].uuid].reason
    assert reason is not None
    assert reason.kind == "gpu-lost"
    nvml.restore_gpu(1)
    tree = await recorder.wait_for(lambda t: health_of(t) == ["H"] * 4)
    assert reasons_of(tree) == [""] * 4


async def test_a_mig_fault_gives_the_whole_gpu_its_reason(run_nvidia: RunNvidia) -> None:
    backend, nvml = simulated_backend("a100-mig", mig_strategy="none")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(0, 94, mig=0)
    tree = await recorder.wait_for(first_unhealthy())
    assert reasons_of(tree)[0] == "xid 94: Contained ECC error"


async def test_the_first_reason_stays_while_later_xids_only_extend_the_fault(
    run_nvidia: RunNvidia,
) -> None:
    backend, nvml = simulated_backend("pcie-4gpu")
    recorder = await run_nvidia(backend)
    await watching(backend)
    nvml.inject_xid(2, 79)
    nvml.inject_xid(2, 48)
    nvml.inject_xid(3, 79)  # handled after the 48: once GPU 3 is marked, GPU 2 has seen both
    await recorder.wait_for(lambda t: health_of(t) == ["H", "H", "U", "U"])
    assert reasons_of(recorder.latest)[2] == "xid 79: GPU has fallen off the bus"
