"""GPU node labels, case by case against gpu-feature-discovery's own tests.

Cases cite NVIDIA/k8s-device-plugin's ``internal/lm`` tests by file and case
description; the GPUs are built like GFD's mocks (``MOCKMODEL``, 300 MiB,
compute capability 8.0, driver 400.300). Product names with spaces follow
``sanitise`` in ``internal/lm/resource.go``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.config.config import (
    ReplicaDevices,
    ReplicatedResource,
    TimeSlicing,
)
from accel_plugins.backends.nvidia.discovery import Gpu, MigDevice, Node
from accel_plugins.backends.nvidia.labels.node_labels import (
    LabelFacts,
    Sharing,
    arch_family,
    node_labels,
    render,
    sanitise,
    version_labels,
)
from accel_plugins.util.nfd import write_feature_file

GPU = "nvidia.com/gpu"


def gpu(
    index: int = 0, *, name: str = "MOCKMODEL", migs: tuple[MigDevice, ...] = (), mig: bool = False
) -> Gpu:
    return Gpu(
        index=index,
        uuid=f"GPU-{index}",
        minor=index,
        name=name,
        memory_mib=300,
        pci_bus_id=f"0000:0{index}:00.0",
        numa_node=None,
        mig_enabled=mig or bool(migs),
        migs=migs,
    )


def mig(profile: str, memory: int, slot: int = 0) -> MigDevice:
    return MigDevice(f"MIG-{profile}-{slot}", f"0:{slot}", profile, slot, 0, memory)


def facts(*gpus: Gpu, capable: bool = False) -> LabelFacts:
    return LabelFacts(
        driver_version="400.300",
        cuda_driver_version=11020,
        compute_capability={g.uuid: (8, 0) for g in gpus},
        mig_capable=frozenset(g.uuid for g in gpus if capable or g.mig_enabled),
    )


def shared(replicas: int, *, rename: str = "", resource: str = GPU) -> TimeSlicing:
    entry = ReplicatedResource(resource, rename or resource, ReplicaDevices(all=True), replicas)
    return TimeSlicing(resources=(entry,))


def labels(*gpus: Gpu, strategy: str = "none", sharing: Sharing | None = None) -> dict[str, str]:
    found = node_labels(
        Node(gpus=gpus), facts(*gpus), mig_strategy=strategy, sharing=sharing or Sharing()
    )
    return {k: v for k, v in found.items() if not k.startswith("nvidia.com/cuda.")}


FULL = {
    f"{GPU}.compute.major": "8",
    f"{GPU}.compute.minor": "0",
    f"{GPU}.family": "ampere",
    f"{GPU}.count": "1",
    f"{GPU}.replicas": "1",
    f"{GPU}.sharing-strategy": "none",
    f"{GPU}.memory": "300",
    f"{GPU}.product": "MOCKMODEL",
    "nvidia.com/mig.capable": "false",
    "nvidia.com/mps.capable": "false",
}

CASES = [
    # resource_test.go TestGPUResourceLabeler "no sharing"; nvml_test.go mig.capable false.
    pytest.param((gpu(),), "none", None, FULL, id="resource_test/no-sharing"),
    # resource_test.go "time-slicing ignores non-matching resource"
    pytest.param(
        (gpu(),),
        "none",
        Sharing(shared(2, resource="nvidia.com/other")),
        FULL,
        id="resource_test/time-slicing-ignores-non-matching-resource",
    ),
    # resource_test.go "time-slicing appends suffix and doubles count"
    pytest.param(
        (gpu(),),
        "none",
        Sharing(shared(2)),
        FULL
        | {
            f"{GPU}.replicas": "2",
            f"{GPU}.sharing-strategy": "time-slicing",
            f"{GPU}.product": "MOCKMODEL-SHARED",
        },
        id="resource_test/time-slicing-appends-suffix",
    ),
    # resource_test.go "time-slicing renamed does not append suffix and doubles count"
    pytest.param(
        (gpu(),),
        "none",
        Sharing(shared(2, rename="nvidia.com/gpu.shared")),
        FULL | {f"{GPU}.replicas": "2", f"{GPU}.sharing-strategy": "time-slicing"},
        id="resource_test/time-slicing-renamed-no-suffix",
    ),
    # resource_test.go "mps appends suffix and doubles count"; nvml_test.go TestSharingLabeler
    # "config with mps replicas no-mig-devices": mps.capable true.
    pytest.param(
        (gpu(),),
        "none",
        Sharing(shared(2), mps=True),
        FULL
        | {
            f"{GPU}.replicas": "2",
            f"{GPU}.sharing-strategy": "mps",
            f"{GPU}.product": "MOCKMODEL-SHARED",
            "nvidia.com/mps.capable": "true",
        },
        id="resource_test/mps-appends-suffix",
    ),
    # mig-strategy_test.go TestMigStrategySingleLabels "multiple non-mig device returns
    # non-mig (none) labels": the count is every GPU of the model.
    pytest.param(
        (gpu(0), gpu(1)),
        "single",
        None,
        FULL | {f"{GPU}.count": "2", "nvidia.com/mig.strategy": "single"},
        id="mig-strategy_test/single-multiple-non-mig",
    ),
    # mig-strategy_test.go "single mig-enabled device returns mig labels" (engines and
    # multiprocessors left out: not read); nvml_test.go mig.capable true.
    pytest.param(
        (gpu(migs=(mig("1g.100gb", 100),)),),
        "single",
        None,
        {
            f"{GPU}.count": "1",
            f"{GPU}.replicas": "1",
            f"{GPU}.sharing-strategy": "none",
            f"{GPU}.memory": "100",
            f"{GPU}.product": "MOCKMODEL-MIG-1g.100gb",
            f"{GPU}.slices.gi": "1",
            f"{GPU}.slices.ci": "1",
            f"{GPU}.compute.major": "8",
            f"{GPU}.compute.minor": "0",
            f"{GPU}.family": "ampere",
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mps.capable": "false",
        },
        id="mig-strategy_test/single-mig-enabled",
    ),
    # mig-strategy.go newInvalidMigStrategyLabeler: MIG on and off on one node.
    pytest.param(
        (gpu(0, migs=(mig("3g.20gb", 20),)), gpu(1)),
        "single",
        None,
        FULL
        | {
            f"{GPU}.count": "0",
            f"{GPU}.replicas": "0",
            f"{GPU}.sharing-strategy": "",
            f"{GPU}.memory": "0",
            f"{GPU}.product": "MOCKMODEL-MIG-INVALID",
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/mig.capable": "true",
        },
        id="mig-strategy/single-invalid-mixed-modes",
    ),
    # gpu-feature-discovery mig_test.go TestMigStrategyMixed: a count per MIG profile.
    pytest.param(
        (gpu(migs=(mig("3g.20gb", 20, 0), mig("1g.5gb", 5, 1))),),
        "mixed",
        None,
        {
            f"{GPU}.count": "1",
            f"{GPU}.replicas": "0",  # a MIG-enabled GPU carries no sharing
            f"{GPU}.sharing-strategy": "none",
            f"{GPU}.memory": "300",
            f"{GPU}.product": "MOCKMODEL",
            f"{GPU}.compute.major": "8",
            f"{GPU}.compute.minor": "0",
            f"{GPU}.family": "ampere",
            "nvidia.com/mig-3g.20gb.count": "1",
            "nvidia.com/mig-3g.20gb.replicas": "1",
            "nvidia.com/mig-3g.20gb.sharing-strategy": "none",
            "nvidia.com/mig-3g.20gb.memory": "20",
            "nvidia.com/mig-3g.20gb.product": "MOCKMODEL-MIG-3g.20gb",
            "nvidia.com/mig-3g.20gb.slices.gi": "3",
            "nvidia.com/mig-3g.20gb.slices.ci": "3",
            "nvidia.com/mig-1g.5gb.count": "1",
            "nvidia.com/mig-1g.5gb.replicas": "1",
            "nvidia.com/mig-1g.5gb.sharing-strategy": "none",
            "nvidia.com/mig-1g.5gb.memory": "5",
            "nvidia.com/mig-1g.5gb.product": "MOCKMODEL-MIG-1g.5gb",
            "nvidia.com/mig-1g.5gb.slices.gi": "1",
            "nvidia.com/mig-1g.5gb.slices.ci": "1",
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mps.capable": "false",
        },
        id="mig_test/mixed-count-per-profile",
    ),
]


@pytest.mark.parametrize(("gpus", "strategy", "sharing", "expected"), CASES)
def test_labels_match_gfd(
    gpus: tuple[Gpu, ...], strategy: str, sharing: Sharing | None, expected: dict[str, str]
) -> None:
    assert labels(*gpus, strategy=strategy, sharing=sharing) == expected


def test_no_gpus_no_labels() -> None:
    # nvml_test.go TestMigCapabilityLabeler "no devices returns empty labels"
    assert node_labels(Node(gpus=()), facts(), mig_strategy="none", sharing=Sharing()) == {}


@pytest.mark.parametrize(
    ("driver", "cuda", "expected"),
    [
        # nvml.go newVersionLabeler; tests/expected-output.txt's formats.
        pytest.param(
            "550.54.15",
            12040,
            {
                "nvidia.com/cuda.driver.major": "550",
                "nvidia.com/cuda.driver.minor": "54",
                "nvidia.com/cuda.driver.rev": "15",
                "nvidia.com/cuda.runtime.major": "12",
                "nvidia.com/cuda.runtime.minor": "4",
                "nvidia.com/cuda.driver-version.major": "550",
                "nvidia.com/cuda.driver-version.minor": "54",
                "nvidia.com/cuda.driver-version.revision": "15",
                "nvidia.com/cuda.driver-version.full": "550.54.15",
                "nvidia.com/cuda.runtime-version.major": "12",
                "nvidia.com/cuda.runtime-version.minor": "4",
                "nvidia.com/cuda.runtime-version.full": "12.4",
            },
            id="x.y.z",
        ),
        pytest.param(
            "400.300",
            11020,
            {
                "nvidia.com/cuda.driver.major": "400",
                "nvidia.com/cuda.driver.minor": "300",
                "nvidia.com/cuda.driver.rev": "",
                "nvidia.com/cuda.runtime.major": "11",
                "nvidia.com/cuda.runtime.minor": "2",
                "nvidia.com/cuda.driver-version.major": "400",
                "nvidia.com/cuda.driver-version.minor": "300",
                "nvidia.com/cuda.driver-version.revision": "",
                "nvidia.com/cuda.driver-version.full": "400.300",
                "nvidia.com/cuda.runtime-version.major": "11",
                "nvidia.com/cuda.runtime-version.minor": "2",
                "nvidia.com/cuda.runtime-version.full": "11.2",
            },
            id="x.y-no-revision",
        ),
        pytest.param("550", 12040, {}, id="not-x.y-is-refused"),
    ],
)
def test_version_labels(driver: str, cuda: int, expected: dict[str, str]) -> None:
    assert version_labels(driver, cuda) == expected


@pytest.mark.parametrize(
    ("name", "product"),
    [
        pytest.param("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB", id="space-to-dash"),
        pytest.param("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3", id="several-spaces"),
        pytest.param("Tesla  T4 (rev a1)", "Tesla-T4-rev-a1", id="doubled-space-and-brackets"),
    ],
)
def test_product_names_are_sanitised_as_gfd_does(name: str, product: str) -> None:
    assert sanitise(name) == product


@pytest.mark.parametrize(
    ("major", "minor", "family"),
    [
        pytest.param(7, 0, "volta", id="7.0"),
        pytest.param(7, 5, "turing", id="7.5"),
        pytest.param(8, 0, "ampere", id="8.0"),
        pytest.param(8, 9, "ada-lovelace", id="8.9"),
        pytest.param(9, 0, "hopper", id="9.0"),
        pytest.param(10, 0, "blackwell", id="10.0"),
        pytest.param(12, 0, "blackwell", id="12.0"),
        pytest.param(4, 0, "undefined", id="unknown"),
    ],
)
def test_architecture_family(major: int, minor: int, family: str) -> None:
    # resource.go getArchFamily
    assert arch_family(major, minor) == family


def test_the_feature_file_is_replaced_atomically_and_only_on_change(tmp_path: Path) -> None:
    path = tmp_path / "accel-plugins-nvidia"
    text = render(labels(gpu()))
    assert write_feature_file(path, text)
    first = path.stat()
    assert not write_feature_file(path, text)  # same labels: the file is left alone
    assert path.stat().st_ino == first.st_ino
    assert write_feature_file(path, render(labels(gpu(0), gpu(1))))
    assert path.stat().st_ino != first.st_ino  # a new file renamed over the old one
    assert "nvidia.com/gpu.count=2\n" in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    # NFD skips dot-files, so the temporary file is never read half-written.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["accel-plugins-nvidia"]
