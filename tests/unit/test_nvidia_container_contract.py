"""Allocate responses: every device-list strategy combination, both ID strategies."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.container_contract import (
    AllocateSettings,
    container_allocation,
    generated_mig_minors,
    read_mig_minors,
)
from accel_plugins.backends.nvidia.discovery import Node, discover
from accel_plugins.backends.nvidia.nvml import session
from accel_plugins.backends.nvidia.resources import build_resources
from accel_plugins.backends.nvidia.sharing import replicate
from accel_plugins.backends.nvidia.simulate import SimulatedNvml
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceNode, Mount
from tests.nvidia_fixtures import profile

STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
COMBINATIONS = [combo for n in range(1, 5) for combo in itertools.combinations(STRATEGIES, n)]
ANNOTATION_NAMESPACE = uuid.UUID("0b7e9b4c-64a5-4d0e-9a38-4f2b7f1d9e11")


def node_of(name: str) -> Node:
    nvml = SimulatedNvml(profile(name))
    with session(nvml):
        return discover(nvml)


def gpus(count: int = 2) -> list[Device]:
    return build_resources(node_of("pcie-4gpu"), "none")["nvidia.com/gpu"][:count]


def allocate(
    devices: Sequence[Device], strategies: Sequence[str], id_strategy: str = "uuid"
) -> ContainerAllocation:
    return container_allocation(
        devices,
        AllocateSettings(device_list_strategies=tuple(strategies), device_id_strategy=id_strategy),
    )


def expected(strategies: Sequence[str], ids: list[str]) -> ContainerAllocation:
    """NVIDIA's rules, stated once: each strategy contributes its part."""
    envs: dict[str, str] = {}
    mounts: tuple[Mount, ...] = ()
    annotations: dict[str, str] = {}
    cdi: tuple[str, ...] = ()
    names = [f"nvidia.com/gpu={i}" for i in ids]
    if "envvar" in strategies:
        envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(ids)
    if "volume-mounts" in strategies:  # wins over envvar's value
        envs["NVIDIA_VISIBLE_DEVICES"] = "/var/run/nvidia-container-devices"
        mounts = tuple(Mount("/dev/null", f"/var/run/nvidia-container-devices/{i}") for i in ids)
    if "cdi-annotations" in strategies:
        key = f"nvidia-device-plugin_{uuid.uuid5(ANNOTATION_NAMESPACE, ','.join(ids))}"
        annotations[f"cdi.k8s.io/{key}"] = ",".join(names)
    if "cdi-cri" in strategies:
        cdi = tuple(names)
    return ContainerAllocation(mounts=mounts, envs=envs, annotations=annotations, cdi_devices=cdi)


@pytest.mark.parametrize("id_strategy", ["uuid", "index"])
@pytest.mark.parametrize("strategies", [pytest.param(c, id="+".join(c)) for c in COMBINATIONS])
def test_every_strategy_combination(strategies: tuple[str, ...], id_strategy: str) -> None:
    devices = gpus(2)
    ids = [d.id for d in devices] if id_strategy == "uuid" else ["0", "1"]
    assert allocate(devices, strategies, id_strategy) == expected(strategies, ids)


@pytest.mark.parametrize(
    ("strategies", "id_strategy", "envs", "mount_paths", "cdi"),
    [
        pytest.param(
            ["envvar"], "index", {"NVIDIA_VISIBLE_DEVICES": "0,1"}, [], (), id="envvar-index"
        ),
        pytest.param(
            ["volume-mounts"],
            "index",
            {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
            ["/var/run/nvidia-container-devices/0", "/var/run/nvidia-container-devices/1"],
            (),
            id="volume-mounts-index",
        ),
        pytest.param(
            ["cdi-cri"], "index", {}, [], ("nvidia.com/gpu=0", "nvidia.com/gpu=1"), id="cdi-cri"
        ),
    ],
)
def test_literal_responses(
    strategies: list[str],
    id_strategy: str,
    envs: dict[str, str],
    mount_paths: list[str],
    cdi: tuple[str, ...],
) -> None:
    got = allocate(gpus(2), strategies, id_strategy)
    assert dict(got.envs) == envs
    assert [m.container_path for m in got.mounts] == mount_paths
    assert all(m.host_path == "/dev/null" for m in got.mounts)
    assert got.cdi_devices == cdi
    assert got.nodes == ()


def test_cdi_annotation_key_has_nvidias_shape() -> None:
    got = allocate(gpus(1), ["cdi-annotations"])
    [(key, value)] = got.annotations.items()
    assert key.startswith("cdi.k8s.io/nvidia-device-plugin_")
    assert len(key.split("/", 1)[1]) <= 63  # the annotation name limit
    assert value == f"nvidia.com/gpu={gpus(1)[0].id}"


def test_custom_cdi_annotation_prefix() -> None:
    settings = AllocateSettings(
        device_list_strategies=("cdi-annotations",), cdi_annotation_prefix="cdi.example.com/"
    )
    [key] = container_allocation(gpus(1), settings).annotations
    assert key.startswith("cdi.example.com/nvidia-device-plugin_")


def test_replicas_of_one_gpu_are_named_once() -> None:
    gpu = gpus(1)[0]
    replicas = replicate(gpu, 4)
    assert [r.id for r in replicas] == [f"{gpu.id}::{n}" for n in range(4)]
    got = allocate(replicas[1:3], ["envvar", "cdi-cri"])
    assert dict(got.envs) == {"NVIDIA_VISIBLE_DEVICES": gpu.id}
    assert got.cdi_devices == (f"nvidia.com/gpu={gpu.id}",)


def test_mig_devices_by_uuid_and_index() -> None:
    migs = build_resources(node_of("a100-mig"), "mixed")["nvidia.com/mig-1g.5gb"][:3]
    assert dict(allocate(migs, ["envvar"], "index").envs) == {
        "NVIDIA_VISIBLE_DEVICES": "0:2,0:3,1:0"
    }
    assert dict(allocate(migs, ["envvar"]).envs) == {
        "NVIDIA_VISIBLE_DEVICES": ",".join(m.id for m in migs)
    }


CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]


@pytest.mark.parametrize(
    ("driver_root", "prefix"),
    [
        pytest.param("/", "", id="host-driver"),
        pytest.param("/run/nvidia/driver", "/run/nvidia/driver", id="driver-container"),
    ],
)
def test_pass_device_specs_for_gpus(driver_root: str, prefix: str) -> None:
    root = Path(driver_root)
    devices = build_resources(node_of("pcie-4gpu"), "none", driver_root=root, device_specs=True)[
        "nvidia.com/gpu"
    ]
    settings = AllocateSettings(pass_device_specs=True, driver_root=root)
    got = container_allocation([devices[1], devices[3]], settings)
    assert got.nodes == tuple(
        DeviceNode(host_path=prefix + path, container_path=path, permissions="rw")
        for path in ["/dev/nvidia1", "/dev/nvidia3", *CONTROL]
    )


def test_pass_device_specs_for_mig_adds_capability_nodes() -> None:
    minors = generated_mig_minors(4)
    migs = build_resources(node_of("a100-mig"), "mixed", device_specs=True, mig_minors=minors)[
        "nvidia.com/mig-1g.5gb"
    ]
    one = migs[0]  # GPU 0, slot 2 -> GPU instance 3, compute instance 0 in the simulation
    gi = minors["gpu0/gi3/access"]
    ci = minors["gpu0/gi3/ci0/access"]
    got = container_allocation([one], AllocateSettings(pass_device_specs=True))
    assert [n.container_path for n in got.nodes] == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{gi}",
        f"/dev/nvidia-caps/nvidia-cap{ci}",
        *CONTROL,
    ]


def test_two_mig_devices_on_one_gpu_share_the_parent_node_once() -> None:
    migs = build_resources(
        node_of("a100-mig"), "mixed", device_specs=True, mig_minors=generated_mig_minors(4)
    )["nvidia.com/mig-1g.5gb"][:2]
    got = container_allocation(migs, AllocateSettings(pass_device_specs=True))
    paths = [n.container_path for n in got.nodes]
    assert paths.count("/dev/nvidia0") == 1
    assert len(paths) == 1 + 4 + len(CONTROL)


def test_mig_minors_file_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "mig-minors"
    path.write_text("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\nbad\n")
    assert read_mig_minors(path) == {
        "config": 1,
        "monitor": 2,
        "gpu0/gi1/access": 12,
        "gpu0/gi1/ci0/access": 13,
    }
    assert read_mig_minors(tmp_path / "absent") == {}
