"""The pynvml adapter, through the real pynvml bindings, against a fake libnvidia-ml.so.1.

The fake (tests/nvml_fake/fake_nvml.c) answers from a table each test writes;
see that file for the record format. These tests skip when gcc is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.discovery import Gpu, MigDevice, discover
from accel_plugins.backends.nvidia.errors import GpuLostError, NvmlError, NvmlInitError
from accel_plugins.backends.nvidia.nvml import XidEvent, session
from tests.fixtures.nvidia import FakeNvml, RunNvidia, settings, watching

UUID0 = "GPU-00000000-1111-2222-3333-444444444444"
UUID1 = "GPU-55555555-6666-7777-8888-999999999999"
MIG10 = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
MIG11 = "MIG-ffffffff-bbbb-cccc-dddd-eeeeeeeeeeee"
BUS0 = "00000000:07:00.0"
BUS1 = "00000000:0F:00.0"

TWO_GPUS = (
    f"gpu {UUID0} 0 81920 {BUS0} 0 0 NVIDIA A100-SXM4-80GB",
    f"gpu {UUID1} 1 81920 {BUS1} 1 1 NVIDIA A100-SXM4-80GB",
    # slot 0 empty on purpose: MIG slots need not be contiguous
    f"mig 1 1 {MIG10} 2 0 3 3 40192",
    f"mig 1 3 {MIG11} 9 0 1 1 9728",
    "topo 0 1 50",
)


def test_discovery_reads_every_field(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(*TWO_GPUS, *(f"link 0 {BUS1}" for _ in range(4)))
    fake_nvml.write(*(f"link 1 {BUS0}" for _ in range(4)))
    nvml = fake_nvml.adapter()
    with session(nvml):
        node = discover(nvml)
    assert node.gpus == (
        Gpu(
            index=0,
            uuid=UUID0,
            minor=0,
            name="NVIDIA A100-SXM4-80GB",
            memory_mib=81920,
            pci_bus_id="0000:07:00.0",
            numa_node=0,
            mig_enabled=False,
            links=("X", "NV4+SYS"),
            peers=(0, 1),
        ),
        Gpu(
            index=1,
            uuid=UUID1,
            minor=1,
            name="NVIDIA A100-SXM4-80GB",
            memory_mib=81920,
            pci_bus_id="0000:0f:00.0",
            numa_node=1,
            mig_enabled=True,
            migs=(
                MigDevice(MIG10, "1:0", "3g.40gb", 2, 0, 40192),
                MigDevice(MIG11, "1:1", "1g.10gb", 9, 0, 9728),
            ),
            links=("NV4+SYS", "X"),
            peers=(0, 1),
        ),
    )


def test_init_and_shutdown_are_paired(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(*TWO_GPUS)
    before = (fake_nvml.count("fakeNvmlInitCount"), fake_nvml.count("fakeNvmlShutdownCount"))
    nvml = fake_nvml.adapter()
    with session(nvml):
        assert fake_nvml.count("fakeNvmlRefcount") == 1
        assert nvml.device_count() == 2
    after = (fake_nvml.count("fakeNvmlInitCount"), fake_nvml.count("fakeNvmlShutdownCount"))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    assert fake_nvml.count("fakeNvmlRefcount") == 0
    assert nvml.loaded_from == str(fake_nvml.library)


@pytest.mark.parametrize(
    ("level", "token"),
    [
        pytest.param(0, "BOARD", id="same-board"),
        pytest.param(10, "PIX", id="single-switch"),
        pytest.param(20, "PXB", id="multiple-switches"),
        pytest.param(30, "PHB", id="host-bridge"),
        pytest.param(40, "NODE", id="numa-node"),
        pytest.param(50, "SYS", id="system"),
        pytest.param(60, "?", id="unknown-level"),
    ],
)
def test_pcie_levels_become_pcie_relations(fake_nvml: FakeNvml, level: int, token: str) -> None:
    fake_nvml.write(*TWO_GPUS[:2], f"topo 0 1 {level}")
    nvml = fake_nvml.adapter()
    with session(nvml):
        node = discover(nvml)
    assert [g.links for g in node.gpus] == [("X", token), (token, "X")]


def test_nvswitch_links_count_nothing_and_direct_links_count_once(fake_nvml: FakeNvml) -> None:
    gpus = [
        f"gpu GPU-0000000{i}-0000-0000-0000-000000000000 {i} 1 0000000{i}:01:00.0 0 0 G"
        for i in range(3)
    ]
    switch = [f"link {i} 00000000:F{s}:00.0" for i in range(3) for s in range(6)]
    fake_nvml.write(
        *gpus,
        *switch,
        "link 0 00000002:01:00.0",  # a direct 0-2 link, seen from one end only
        "topo 0 1 40",
        "topo 0 2 10",
        "topo 1 2 50",
    )
    nvml = fake_nvml.adapter()
    with session(nvml):
        node = discover(nvml)
    assert [g.links for g in node.gpus] == [
        ("X", "NODE", "NV1+PIX"),
        ("NODE", "X", "SYS"),
        ("NV1+PIX", "SYS", "X"),
    ]


def test_every_link_slot_is_read_and_inactive_ones_are_skipped(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(
        *TWO_GPUS[:2],
        "topo 0 1 10",
        f"link 0 {BUS1}",
        "link 0 -",  # a slot that answers NOT_SUPPORTED: later slots still count
        f"link 0 {BUS1} down",  # inactive: no link
        f"link 0 {BUS1}",
        f"link 1 {BUS0}",
    )
    nvml = fake_nvml.adapter()
    with session(nvml):
        assert nvml.nvlink_remotes(nvml.device_handle(0)) == ["0000:0f:00.0"] * 2
        node = discover(nvml)
    assert [g.links for g in node.gpus] == [("X", "NV2+PIX"), ("NV2+PIX", "X")]


def test_numa_node_falls_back_to_sysfs(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    fake_nvml.write(f"gpu {UUID0} 0 1024 {BUS0} na 0 G", f"gpu {UUID1} 1 1024 {BUS1} na 0 G")
    device = tmp_path / "sys/bus/pci/devices/0000:07:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    nvml = fake_nvml.adapter(sys_root=tmp_path / "sys")
    with session(nvml):
        node = discover(nvml)
    assert [g.numa_node for g in node.gpus] == [1, None]  # no sysfs entry for the second


def test_events_are_read_and_attributed(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(*TWO_GPUS, "event 0 79 -1 -1", "event 1 94 9 0", "lostevent")
    nvml = fake_nvml.adapter()
    with session(nvml):
        events = nvml.create_event_set()
        for index in range(2):
            events.register(nvml.device_handle(index))
        assert events.wait(10) == XidEvent(UUID0, 79)
        assert events.wait(10) == XidEvent(UUID1, 94, gpu_instance=9, compute_instance=0)
        with pytest.raises(GpuLostError):
            events.wait(10)
        assert events.wait(1) is None  # a timeout is no event, not an error
        events.free()


def test_a_lost_gpu_raises_gpu_lost(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(*TWO_GPUS, "lost 1")
    nvml = fake_nvml.adapter()
    with session(nvml):
        with pytest.raises(GpuLostError) as caught:
            nvml.device_handle(1)
        node = discover(nvml)
    assert caught.value.call == "nvmlDeviceGetHandleByIndex"
    assert caught.value.code == 15
    assert [g.uuid for g in node.gpus] == [UUID0]
    assert node.lost == (1,)


def test_calls_after_shutdown_fail_with_our_error(fake_nvml: FakeNvml) -> None:
    fake_nvml.write(*TWO_GPUS)
    nvml = fake_nvml.adapter()
    with session(nvml):
        pass
    with pytest.raises(NvmlError, match="nvmlDeviceGetCount failed: Uninitialized"):
        nvml.device_count()


def test_init_failure_says_what_was_loaded(fake_nvml: FakeNvml) -> None:
    fake_nvml.write("init 9")  # NVML_ERROR_DRIVER_NOT_LOADED
    nvml = fake_nvml.adapter(driver_root=Path("/run/nvidia/driver"))
    with pytest.raises(NvmlInitError) as caught:
        nvml.init()
    message = str(caught.value)
    assert "NVML failed to initialise: Driver Not Loaded" in message
    assert f"library: {fake_nvml.library}" in message
    assert "driver root: /run/nvidia/driver" in message
    assert "--fail-on-init-error=false" in message
    assert message.count("\n") >= 3


def test_missing_library_lists_every_path_tried(tmp_path: Path) -> None:
    from accel_plugins.backends.nvidia.nvml import Pynvml, library_candidates

    missing = tmp_path / "driver/usr/lib64/libnvidia-ml.so.1"
    with pytest.raises(NvmlInitError) as caught:
        Pynvml(tmp_path / "driver", library=str(missing)).init()
    message = str(caught.value)
    assert f"{missing}: not found" in message
    assert f"driver root: {tmp_path / 'driver'}" in message
    assert library_candidates(Path("/run/nvidia/driver"))[:3] == [
        "libnvidia-ml.so.1",
        "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1",
        "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    ]


async def test_backend_runs_on_the_real_bindings(
    fake_nvml: FakeNvml, run_nvidia: RunNvidia
) -> None:
    fake_nvml.write(*TWO_GPUS, "event 0 79 -1 -1")
    backend = NvidiaBackend(fake_nvml.adapter(), settings(mig_strategy="mixed"), wait_ms=20)
    recorder = await run_nvidia(backend)
    await watching(backend)
    tree = await recorder.wait_for(lambda t: not t["nvidia.com/gpu"][UUID0].healthy)
    assert sorted(tree) == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]
    assert tree["nvidia.com/mig-3g.40gb"][MIG10].healthy
