"""Time-slicing: replica IDs, renaming, device selection, per-GPU replica counts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.config.config import TimeSlicing, load_config_file
from accel_plugins.backends.nvidia.discovery import discover
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.nvml import session
from accel_plugins.backends.nvidia.resources import build_resources
from accel_plugins.backends.nvidia.sharing import apply_time_slicing, base_id
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.errors import AllocationError, ConfigError
from accel_plugins.plugin.device import Device
from tests.fixtures.nvidia import profile, simulated_backend


def sharing(tmp_path: Path, text: str) -> TimeSlicing:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\nsharing:\n  timeSlicing:\n" + textwrap.indent(text, "    "))
    return load_config_file(path).time_slicing


def resources(name: str, strategy: str = "none") -> dict[str, list[Device]]:
    nvml = SimulatedNvml(profile(name))
    with session(nvml):
        return build_resources(discover(nvml), strategy)


def shape(tree: dict[str, list[Device]]) -> dict[str, list[str]]:
    """Resource -> device IDs with each GPU UUID replaced by its index, for reading."""

    def short(device: Device) -> str:
        index = gpu_facts(device).index
        n = gpu_facts(device).replica
        return index if n is None else f"{index}::{n}"

    return {name: [short(d) for d in devices] for name, devices in tree.items()}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(
            "resources:\n- {name: nvidia.com/gpu, replicas: 2}\n",
            {"nvidia.com/gpu": ["0::0", "0::1", "1::0", "1::1", "2::0", "2::1", "3::0", "3::1"]},
            id="all-devices",
        ),
        pytest.param(
            "renameByDefault: true\nresources:\n- {name: nvidia.com/gpu, replicas: 2}\n",
            {
                "nvidia.com/gpu.shared": [
                    "0::0",
                    "0::1",
                    "1::0",
                    "1::1",
                    "2::0",
                    "2::1",
                    "3::0",
                    "3::1",
                ]
            },
            id="rename-by-default",
        ),
        pytest.param(
            "resources:\n- {name: gpu, replicas: 3, rename: gpu.small, devices: [1, '3']}\n",
            {
                "nvidia.com/gpu": ["0", "2"],
                "nvidia.com/gpu.small": ["1::0", "1::1", "1::2", "3::0", "3::1", "3::2"],
            },
            id="rename-and-list",
        ),
        pytest.param(
            "resources:\n- {name: nvidia.com/gpu, replicas: 2, devices: 1}\n",
            {"nvidia.com/gpu": ["1", "2", "3", "0::0", "0::1"]},
            id="count-keeps-the-rest-whole",
        ),
        pytest.param(
            "resources:\n"
            "- {name: nvidia.com/gpu, replicas: 4, devices: [0, 1]}\n"
            "- {name: nvidia.com/gpu, replicas: 2, devices: [2]}\n",
            {
                "nvidia.com/gpu": [
                    "3",
                    "0::0",
                    "0::1",
                    "0::2",
                    "0::3",
                    "1::0",
                    "1::1",
                    "1::2",
                    "1::3",
                    "2::0",
                    "2::1",
                ]
            },
            id="per-gpu-replica-counts",
        ),
        pytest.param(
            "resources:\n- {name: nvidia.com/mig-1g.5gb, replicas: 2}\n",
            {"nvidia.com/gpu": ["0", "1", "2", "3"]},
            id="absent-resource-is-skipped",
        ),
    ],
)
def test_time_slicing_on_a_four_gpu_node(
    tmp_path: Path, config: str, expected: dict[str, list[str]]
) -> None:
    got = apply_time_slicing(resources("pcie-4gpu"), sharing(tmp_path, config))
    assert shape(got) == expected


def test_replica_ids_are_the_device_id_and_a_number(tmp_path: Path) -> None:
    base = resources("pcie-4gpu")["nvidia.com/gpu"][0]
    got = apply_time_slicing(
        resources("pcie-4gpu"),
        sharing(tmp_path, "resources:\n- {name: gpu, replicas: 3, devices: [0]}\n"),
    )
    replicas = [d for d in got["nvidia.com/gpu"] if gpu_facts(d).replica_of == base.id]
    assert [d.id for d in replicas] == [f"{base.id}::{n}" for n in range(3)]
    assert {base_id(d.id) for d in replicas} == {base.id}
    assert all(d.numa_nodes == base.numa_nodes for d in replicas)
    assert all(gpu_facts(d).uuid == base.id for d in replicas)


def test_mig_devices_are_shared_by_index_and_uuid(tmp_path: Path) -> None:
    tree = resources("a100-mig", "mixed")
    uuid = tree["nvidia.com/mig-1g.5gb"][4].id  # 1:2
    config = f"resources:\n- {{name: mig-1g.5gb, replicas: 2, devices: ['0:3', {uuid}]}}\n"
    got = shape(apply_time_slicing(tree, sharing(tmp_path, config)))
    assert got["nvidia.com/mig-1g.5gb"] == [
        "0:2",
        "1:0",
        "1:1",
        "1:3",
        "1:4",
        "1:5",
        "1:6",
        "0:3::0",
        "0:3::1",
        "1:2::0",
        "1:2::1",
    ]
    assert got["nvidia.com/mig-7g.40gb"] == ["2:0"]


@pytest.mark.parametrize(
    ("config", "field", "reason"),
    [
        pytest.param(
            "resources:\n- {name: gpu, replicas: 2, devices: [7]}\n",
            "sharing.timeSlicing.resources[0].devices[0]",
            "no nvidia.com/gpu device matches '7'",
            id="unknown-index",
        ),
        pytest.param(
            "resources:\n- {name: gpu, replicas: 2, devices: 5}\n",
            "sharing.timeSlicing.resources[0].devices",
            "the node has 4",
            id="count-too-large",
        ),
        pytest.param(
            "resources:\n"
            "- {name: gpu, replicas: 2, devices: [0, 1]}\n"
            "- {name: gpu, replicas: 3, devices: [1]}\n",
            "sharing.timeSlicing.resources[1].devices",
            "already shared by sharing.timeSlicing.resources[0]",
            id="overlap",
        ),
        pytest.param(
            "resources:\n"
            "- {name: gpu, replicas: 2, devices: [0], rename: gpu.a}\n"
            "- {name: gpu, replicas: 3, devices: [1], rename: gpu.b}\n",
            "sharing.timeSlicing.resources[1].rename",
            "must use the same name",
            id="split-renamed-apart",
        ),
    ],
)
def test_sharing_errors_name_the_entry(
    tmp_path: Path, config: str, field: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        apply_time_slicing(resources("pcie-4gpu"), sharing(tmp_path, config), source=str(tmp_path))
    assert caught.value.field == field
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("fail_greater_than_one", "count", "allowed"),
    [
        pytest.param(True, 1, True, id="one-replica"),
        pytest.param(True, 2, False, id="two-replicas-refused"),
        pytest.param(False, 2, True, id="two-replicas-allowed"),
    ],
)
def test_fail_requests_greater_than_one(
    tmp_path: Path, fail_greater_than_one: bool, count: int, allowed: bool
) -> None:
    flag = "true" if fail_greater_than_one else "false"
    config = f"failRequestsGreaterThanOne: {flag}\nresources:\n- {{name: gpu, replicas: 4}}\n"
    backend, _ = simulated_backend("pcie-4gpu", sharing=sharing(tmp_path, config))
    replicas = backend.build(backend.check())["nvidia.com/gpu"][:count]
    if allowed:
        assert backend.allocate("nvidia.com/gpu", replicas).envs
    else:
        with pytest.raises(AllocationError, match="at most 1"):
            backend.allocate("nvidia.com/gpu", replicas)
