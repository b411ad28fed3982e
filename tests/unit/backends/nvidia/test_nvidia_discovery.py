"""Simulated nodes: built-in profiles, the YAML form, and discovery over them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.discovery import Node, discover, mig_profile_name
from accel_plugins.backends.nvidia.errors import NvmlError
from accel_plugins.backends.nvidia.nvml import MigPlacement, normalize_bus_id, session
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile, names
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.errors import ConfigError
from tests.fixtures.nvidia import profile


def discovered(spec: str | dict[str, Any]) -> Node:
    nvml = SimulatedNvml(profile(spec))
    with session(nvml):
        return discover(nvml)


@pytest.mark.parametrize(
    ("name", "count", "model", "row0", "numa"),
    [
        pytest.param(
            "dgx-a100",
            8,
            "NVIDIA A100-SXM4-80GB",
            ["X"] + ["NODE"] * 3 + ["SYS"] * 4,  # NVSwitch links are no GPU-to-GPU links
            [0] * 4 + [1] * 4,
            id="dgx-a100",
        ),
        pytest.param(
            "dgx-h100",
            8,
            "NVIDIA H100 80GB HBM3",
            ["X"] + ["NODE"] * 3 + ["SYS"] * 4,
            [0] * 4 + [1] * 4,
            id="dgx-h100",
        ),
        pytest.param(
            "pcie-8gpu-nvlink-pairs",
            8,
            "NVIDIA H100 NVL",
            ["X", "NV12+PIX", "PIX", "PIX", "SYS", "SYS", "SYS", "SYS"],
            [0] * 4 + [1] * 4,
            id="pcie-8gpu-nvlink-pairs",
        ),
        pytest.param(
            "pcie-4gpu",
            4,
            "NVIDIA L40S",
            ["X", "PHB", "SYS", "SYS"],
            [0, 0, 1, 1],
            id="pcie-4gpu",
        ),
        pytest.param(
            "a100-mig",
            4,
            "NVIDIA A100-SXM4-40GB",
            ["X", "NV4+NODE", "NV4+SYS", "NV4+SYS"],  # bare NV4: the relation from NUMA
            [0, 0, 1, 1],
            id="a100-mig",
        ),
    ],
)
def test_builtin_profiles_discover_as_described(
    name: str, count: int, model: str, row0: list[str], numa: list[int]
) -> None:
    node = discovered(name)
    assert len(node.gpus) == count
    assert {g.name for g in node.gpus} == {model}
    assert list(node.gpus[0].links) == row0
    assert [g.numa_node for g in node.gpus] == numa
    assert [g.index for g in node.gpus] == list(range(count))
    assert [g.minor for g in node.gpus] == list(range(count))
    assert len({g.uuid for g in node.gpus}) == count
    assert all(g.uuid.startswith("GPU-") for g in node.gpus)


def test_every_builtin_profile_is_listed() -> None:
    assert names() == ["a100-mig", "dgx-a100", "dgx-h100", "pcie-4gpu", "pcie-8gpu-nvlink-pairs"]


def test_topology_matrix_is_symmetric_on_pairs_profile() -> None:
    node = discovered("pcie-8gpu-nvlink-pairs")
    matrix = [g.links for g in node.gpus]
    assert all(matrix[i][j] == matrix[j][i] for i in range(8) for j in range(8))
    assert (matrix[2][3], matrix[4][6], matrix[3][4]) == ("NV12+PIX", "PIX", "SYS")


def test_a100_mig_profile_has_mixed_mig_layout() -> None:
    node = discovered("a100-mig")
    assert [[m.profile for m in g.migs] for g in node.gpus] == [
        ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"],
        ["1g.5gb"] * 7,
        ["7g.40gb"],
        [],
    ]
    assert [g.mig_enabled for g in node.gpus] == [True, True, True, False]
    assert [m.index for m in node.gpus[0].migs] == ["0:0", "0:1", "0:2", "0:3"]
    assert all(m.uuid.startswith("MIG-") for g in node.gpus for m in g.migs)


YAML_EXAMPLE = """\
gpus:
  - name: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    numaNode: 0
    pciBusId: "0000:07:00.0"
    mig: [1g.10gb, 1g.10gb, 3g.40gb]
  - {name: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, numaNode: 0}
  - {name: NVIDIA A100-SXM4-80GB, memoryMiB: 81920, numaNode: 1}
  - name: NVIDIA A100-SXM4-80GB
    memoryMiB: 81920
    numaNode: 1
    uuid: GPU-11111111-2222-3333-4444-555555555555
topology:
  - [X, NV12+PIX, PXB, SYS]
  - [NV12+PIX, X, SYS, PXB]
  - [PXB, SYS, X, NV12]
  - [SYS, PXB, NV12, X]
events:
  - {at: 5, gpu: 2, xid: 79}
"""


def test_yaml_profile_from_the_readme(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(YAML_EXAMPLE)
    loaded = load_profile(str(path))
    assert loaded.name == "node"
    assert (loaded.events[0].gpu, loaded.events[0].xid) == (2, 79)
    nvml = SimulatedNvml(loaded)
    with session(nvml):
        node = discover(nvml)
    assert [g.links for g in node.gpus] == [
        ("X", "NV12+PIX", "PXB", "SYS"),
        ("NV12+PIX", "X", "SYS", "PXB"),
        ("PXB", "SYS", "X", "NV12+NODE"),  # a bare NV12 on one NUMA node: NODE
        ("SYS", "PXB", "NV12+NODE", "X"),
    ]
    assert [m.profile for m in node.gpus[0].migs] == ["1g.10gb", "1g.10gb", "3g.40gb"]
    assert node.gpus[3].uuid == "GPU-11111111-2222-3333-4444-555555555555"
    assert node.gpus[0].pci_bus_id == "0000:07:00.0"
    assert node.gpus[1].memory_mib == 81920


def test_pair_tokens_state_both_facts_and_the_simulated_nvml_answers_them() -> None:
    # NVIDIA's two facts per pair, as NVML reports them: the common ancestor and the
    # remote PCI device of each NVLink.
    spec = {
        "gpus": [_gpu(numaNode=0), _gpu(numaNode=0), _gpu(numaNode=1)],
        "topology": [
            ["X", "NV1+BOARD", "NV2"],
            ["NV1+BOARD", "X", "PHB"],
            ["NV2", "PHB", "X"],
        ],
    }
    nvml = SimulatedNvml(profile(spec))
    with session(nvml):
        handles = [nvml.device_handle(i) for i in range(3)]
        levels = [nvml.topology_level(handles[0], h) for h in handles[1:]]
        remotes = [nvml.nvlink_remotes(h) for h in handles]
        node = discover(nvml)
    assert levels == [0, 50]  # BOARD is NVML's TOPOLOGY_INTERNAL; a bare NV2 across NUMA: SYS
    buses = [g.pci_bus_id for g in node.gpus]
    assert remotes == [[buses[1], buses[2], buses[2]], [buses[0]], [buses[0], buses[0]]]
    assert [g.links for g in node.gpus] == [
        ("X", "NV1+BOARD", "NV2+SYS"),
        ("NV1+BOARD", "X", "PHB"),
        ("NV2+SYS", "PHB", "X"),
    ]


def test_nvswitch_profiles_may_state_the_pcie_relation() -> None:
    spec = {
        "gpus": [_gpu(numaNode=0) for _ in range(3)],
        "nvswitch": True,
        "topology": [
            ["X", "NV12+PXB", "NV12"],
            ["NV12+PXB", "X", "NV12"],
            ["NV12", "NV12", "X"],
        ],
    }
    node = discovered(spec)
    # Every link ends on an NVSwitch: no pair has a direct NVLink.
    assert [g.links for g in node.gpus] == [
        ("X", "PXB", "NODE"),
        ("PXB", "X", "NODE"),
        ("NODE", "NODE", "X"),
    ]


def test_profile_without_topology_uses_numa() -> None:
    node = discovered({"gpus": [{"name": "G", "memoryMiB": 1, "numaNode": n} for n in (0, 0, 1)]})
    assert [g.links for g in node.gpus] == [
        ("X", "NODE", "SYS"),
        ("NODE", "X", "SYS"),
        ("SYS", "SYS", "X"),
    ]


def _gpu(**extra: Any) -> dict[str, Any]:
    return {"name": "G", "memoryMiB": 1024, **extra}


@pytest.mark.parametrize(
    ("document", "field", "reason"),
    [
        pytest.param({"gpus": []}, "gpus", "at least one GPU", id="no-gpus"),
        pytest.param({"gpu": [_gpu()]}, "gpu", "unknown field", id="typo-top"),
        pytest.param({"gpus": [{"memoryMiB": 1}]}, "gpus[0].name", "non-empty", id="no-name"),
        pytest.param(
            {"gpus": [_gpu(memoryMiB="lots")]}, "gpus[0].memoryMiB", "integer", id="bad-memory"
        ),
        pytest.param({"gpus": [_gpu(mig=["2g"])]}, "gpus[0].mig[0]", "MIG profile", id="bad-mig"),
        pytest.param(
            {"gpus": [_gpu(uuid="1234")]}, "gpus[0].uuid", "start with 'GPU-'", id="bad-uuid"
        ),
        pytest.param(
            {"gpus": [_gpu(pciBusId="07:00")]}, "gpus[0].pciBusId", "PCI address", id="bad-bus"
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu(pciBusId="0000:07:00.0")]},
            "gpus[1].pciBusId",
            "repeats gpus[0]",
            id="same-bus",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["X", "NV1"]]},
            "topology",
            "expected 2 rows",
            id="short-matrix",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["X", "NV1"], ["PIX", "X"]]},
            "topology[1][0]",
            "differs",
            id="asymmetric",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["X", "FAST"], ["FAST", "X"]]},
            "topology[0][1]",
            "is not X or a pair token",
            id="bad-token",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["X", "NV0+PIX"], ["NV0+PIX", "X"]]},
            "topology[0][1]",
            "is not X or a pair token",
            id="bad-token-nv0",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["X", "NV2+FAST"], ["NV2+FAST", "X"]]},
            "topology[0][1]",
            "is not X or a pair token",
            id="bad-token-relation",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["X", "PIX+NV2"], ["PIX+NV2", "X"]]},
            "topology[0][1]",
            "is not X or a pair token",
            id="bad-token-order",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["X", "NV2PIX"], ["NV2PIX", "X"]]},
            "topology[0][1]",
            "is not X or a pair token",
            id="bad-token-no-plus",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["X", "?"], ["?", "X"]]},
            "topology[0][1]",
            "is not X or a pair token",
            id="bad-token-unknown",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "topology": [["PIX", "X"], ["X", "PIX"]]},
            "topology[0][0]",
            "diagonal",
            id="x-off-diagonal",
        ),
        pytest.param(
            {"gpus": [_gpu()], "events": [{"at": 1, "gpu": 3, "xid": 79}]},
            "events[0].gpu",
            "no GPU 3",
            id="event-gpu",
        ),
        pytest.param(
            {"gpus": [_gpu()], "events": [{"at": 1, "gpu": 0}]},
            "events[0]",
            "exactly one of",
            id="event-without-fault",
        ),
        pytest.param(
            {"gpus": [_gpu(), _gpu()], "nvswitch": True},
            "nvswitch",
            "same NV<n>",
            id="nvswitch-without-nvlink",
        ),
    ],
)
def test_bad_profiles_name_field_and_reason(
    document: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        profile(document)
    assert caught.value.source == "test profile"
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_unknown_profile_name_lists_the_builtins() -> None:
    with pytest.raises(ConfigError, match="dgx-h100"):
        load_profile("dgx-z900")


def test_bad_yaml_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("gpus: [\n")
    with pytest.raises(ConfigError, match="not valid YAML") as caught:
        load_profile(str(path))
    assert caught.value.source == str(path)


@pytest.mark.parametrize(
    ("placement", "name"),
    [
        pytest.param(MigPlacement(1, 0, 1, 1, 4864), "1g.5gb", id="a100-40-1g"),
        pytest.param(MigPlacement(1, 0, 1, 1, 9728), "1g.10gb", id="a100-80-1g"),
        pytest.param(MigPlacement(2, 0, 3, 3, 40192), "3g.40gb", id="3g"),
        pytest.param(MigPlacement(2, 1, 3, 1, 19968), "1c.3g.20gb", id="shared-gi"),
    ],
)
def test_mig_profile_names(placement: MigPlacement, name: str) -> None:
    assert mig_profile_name(placement) == name


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        pytest.param("00000000:07:00.0", "0000:07:00.0", id="nvml-form"),
        pytest.param("0000:B7:00.0", "0000:b7:00.0", id="upper-case"),
        pytest.param("0001:07:00.0", "0001:07:00.0", id="other-domain"),
    ],
)
def test_bus_ids_are_normalised(raw: str, normal: str) -> None:
    assert normalize_bus_id(raw) == normal


def test_simulated_calls_outside_init_fail_like_nvml() -> None:
    nvml = SimulatedNvml(profile("pcie-4gpu"))
    with pytest.raises(NvmlError, match="Uninitialized"):
        nvml.device_count()
    with session(nvml):
        assert nvml.device_count() == 4
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_a_lost_gpu_is_left_out_of_discovery() -> None:
    nvml = SimulatedNvml(profile("pcie-4gpu"))
    nvml.lose_gpu(2)
    with session(nvml):
        node = discover(nvml)
    assert [g.index for g in node.gpus] == [0, 1, 3]
    assert node.lost == (2,)
    assert node.gpus[2].links == ("SYS", "SYS", "X")
    assert node.gpus[2].peers == (0, 1, 3)


@pytest.mark.parametrize(
    ("profile", "index"), [("pcie-8gpu-nvlink-pairs", 0), ("a100", 7), ("ü", 1)]
)
def test_simulated_uuids_are_rfc4122_name_based_uuids_in_our_namespace(
    profile: str, index: int
) -> None:
    """Written out without the uuid module (it loads platform's regexes at start-up);
    the text is what uuid.uuid5 gives for the same namespace and name."""
    import uuid

    from accel_plugins.backends.nvidia.simulate.simulated_profile import gpu_uuid, mig_uuid

    namespace = uuid.UUID("6c1b1a9e-8f1e-4b8a-9d6e-3a3f4f0c2b71")
    gpu = gpu_uuid(profile, index)
    assert gpu == f"GPU-{uuid.uuid5(namespace, f'{profile}/{index}')}"
    assert mig_uuid(gpu, 3) == f"MIG-{uuid.uuid5(namespace, f'{gpu}/mig/3')}"
