"""The NVIDIA backend behind the manager, seen from the kubelet emulator.

Real sockets and real gRPC end to end; only the GPUs are simulated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from accel_plugins.backends.nvidia.config.config import (
    ReplicaDevices,
    ReplicatedResource,
    TimeSlicing,
)
from accel_plugins.kubelet_emulator import Kubelet, PluginCallError
from accel_plugins.kubelet_emulator.model import DeviceSpec, MountSpec
from accel_plugins.testing import FakeHost
from tests.fixtures.framework import StartManager
from tests.fixtures.nvidia import simulated_backend

GPU = "nvidia.com/gpu"


async def test_a_dgx_registers_its_gpus_with_numa(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    backend, nvml = simulated_backend("dgx-h100")
    await start_manager(backend)
    view = await kubelet.wait_for_resource(GPU, allocatable=8)
    uuids = [g.uuid for g in nvml.profile.gpus]
    assert sorted(view.devices) == sorted(uuids)
    assert [view.devices[u].numa_nodes for u in uuids] == [(0,)] * 4 + [(1,)] * 4
    (registration,) = kubelet.registrations
    assert registration.endpoint == "nvidia.com_gpu.sock"


@pytest.mark.parametrize(
    ("options", "envs", "mounts", "annotation_prefix", "cdi", "device_paths"),
    [
        pytest.param(
            {}, {"NVIDIA_VISIBLE_DEVICES": "{u0},{u1}"}, [], None, (), [], id="envvar-uuid"
        ),
        pytest.param(
            {"strategies": ["volume-mounts"], "id_strategy": "index"},
            {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
            ["/var/run/nvidia-container-devices/0", "/var/run/nvidia-container-devices/1"],
            None,
            (),
            [],
            id="volume-mounts-index",
        ),
        pytest.param(
            {"strategies": ["cdi-annotations", "cdi-cri"]},
            {},
            [],
            "cdi.k8s.io/nvidia-device-plugin_",
            ("k8s.device-plugin.nvidia.com/gpu={u0}", "k8s.device-plugin.nvidia.com/gpu={u1}"),
            [],
            id="cdi-annotations+cdi-cri",
        ),
        pytest.param(
            # A fake dev root with two of the four control nodes: only those are passed.
            {"id_strategy": "index", "device_specs": True, "dev_root": "<fake host>"},
            {"NVIDIA_VISIBLE_DEVICES": "0,1"},
            [],
            None,
            (),
            ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1"],
            id="envvar-index-device-specs",
        ),
    ],
)
async def test_allocate_response_per_strategy(
    tmp_path: Path,
    kubelet: Kubelet,
    start_manager: StartManager,
    options: dict[str, Any],
    envs: dict[str, str],
    mounts: list[str],
    annotation_prefix: str | None,
    cdi: tuple[str, ...],
    device_paths: list[str],
) -> None:
    root = ""
    if options.get("dev_root"):
        host = FakeHost(tmp_path / "host")
        host.node("/dev/nvidiactl", major=195, minor=255)
        host.node("/dev/nvidia-uvm", major=508, minor=0)
        root = str(host.root)
        options = options | {"dev_root": root}
    backend, nvml = simulated_backend("pcie-4gpu", **options)
    await start_manager(backend)
    await kubelet.wait_for_resource(GPU, allocatable=4)
    # The default policy keeps the pair on NUMA node 0: GPUs 0 and 1.
    record = await kubelet.allocate("pod", "main", GPU, 2)
    u0, u1 = (g.uuid for g in nvml.profile.gpus[:2])
    assert sorted(record.device_ids) == sorted([u0, u1])
    response = record.response
    assert dict(response.envs) == {k: v.format(u0=u0, u1=u1) for k, v in envs.items()}
    assert response.mounts == tuple(MountSpec(p, "/dev/null", False) for p in mounts)
    assert response.cdi_devices == tuple(c.format(u0=u0, u1=u1) for c in cdi)
    if annotation_prefix is None:
        assert dict(response.annotations) == {}
    else:
        [(key, value)] = response.annotations.items()
        assert key.startswith(annotation_prefix)
        assert (
            value == f"k8s.device-plugin.nvidia.com/gpu={u0},k8s.device-plugin.nvidia.com/gpu={u1}"
        )
    assert response.devices == tuple(DeviceSpec(p, root + p, "rw") for p in device_paths)


async def test_mixed_mig_node_registers_one_resource_per_profile(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    backend, _ = simulated_backend("a100-mig", mig_strategy="mixed", id_strategy="index")
    await start_manager(backend)
    await kubelet.wait_for_resource("nvidia.com/mig-1g.5gb", allocatable=9)
    for resource, count in [
        ("nvidia.com/mig-3g.20gb", 1),
        ("nvidia.com/mig-2g.10gb", 1),
        ("nvidia.com/mig-7g.40gb", 1),
        (GPU, 1),
    ]:
        await kubelet.wait_for_resource(resource, allocatable=count)
    record = await kubelet.allocate("pod", "main", "nvidia.com/mig-7g.40gb", 1)
    assert dict(record.response.envs) == {"NVIDIA_VISIBLE_DEVICES": "2:0"}


async def test_fault_unhealthy_then_recovery(kubelet: Kubelet, start_manager: StartManager) -> None:
    backend, nvml = simulated_backend("pcie-4gpu", recovery=0.1)
    await start_manager(backend)
    await kubelet.wait_for_resource(GPU, allocatable=4)
    assert backend.monitor is not None
    await backend.monitor.ready.wait()
    nvml.inject_xid(3, 48)
    view = await kubelet.wait_for_resource(GPU, allocatable=3)
    assert view.unhealthy == [nvml.profile.gpus[3].uuid]
    view = await kubelet.wait_for_resource(GPU, allocatable=4)
    assert view.unhealthy == []


async def test_gpu_lost_marks_that_gpu_and_the_plugin_keeps_serving(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    backend, nvml = simulated_backend("pcie-4gpu", recovery=0)
    await start_manager(backend)
    await kubelet.wait_for_resource(GPU, allocatable=4)
    assert backend.monitor is not None
    await backend.monitor.ready.wait()
    nvml.lose_gpu(0)
    view = await kubelet.wait_for_resource(GPU, allocatable=3)
    assert view.connected
    assert view.unhealthy == [nvml.profile.gpus[0].uuid]
    record = await kubelet.allocate("pod", "main", GPU, 3)
    assert nvml.profile.gpus[0].uuid not in record.device_ids


async def test_time_sliced_replicas_and_the_one_per_container_rule(
    kubelet: Kubelet, start_manager: StartManager
) -> None:
    sharing = TimeSlicing(
        rename_by_default=True,
        fail_requests_greater_than_one=True,
        resources=(ReplicatedResource(GPU, f"{GPU}.shared", ReplicaDevices(all=True), 4, "test"),),
    )
    backend, _ = simulated_backend("dgx-h100", sharing=sharing)
    await start_manager(backend)
    view = await kubelet.wait_for_resource(f"{GPU}.shared", allocatable=32)
    assert all("::" in d for d in view.devices)
    record = await kubelet.allocate("pod-a", "main", f"{GPU}.shared", 1)
    (replica,) = record.device_ids
    assert dict(record.response.envs) == {"NVIDIA_VISIBLE_DEVICES": replica.split("::")[0]}
    with pytest.raises(PluginCallError) as caught:
        await kubelet.allocate("pod-b", "main", f"{GPU}.shared", 2)
    assert caught.value.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNKNOWN)
    assert "at most 1" in caught.value.details
