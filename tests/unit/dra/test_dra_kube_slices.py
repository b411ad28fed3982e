"""The pure parts of the DRA API side: versions, attribute limits, slicing, MIG attributes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube.models.resource_v1 import Device as KubeDevice
from lightkube.models.resource_v1 import DeviceTaint

from accel_plugins.backends.nvidia.dra_attributes import architecture, cuda_version
from accel_plugins.dra.kube.slices import (
    MAX_ATTRIBUTES,
    PoolIdentity,
    build_slices,
    chunks,
    kube_device,
    pool_devices,
)
from accel_plugins.dra.kube.taints import label_value, taint_maker
from accel_plugins.plugin.device import Device, Health, tree
from accel_plugins.plugin.dra_attributes import DraDeviceInfo, DraVersion, pci_attributes
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from tests.fixtures.nvidia import RunNvidia, simulated_backend


@pytest.mark.parametrize(
    ("text", "semver"),
    [
        pytest.param("550.54.15", "550.54.15", id="driver"),
        pytest.param("535.104.05", "535.104.5", id="leading-zero"),
        pytest.param("12.4", "12.4.0", id="two-parts"),
        pytest.param("9", "9.0.0", id="one-part"),
    ],
)
def test_loose_versions_become_semver(text: str, semver: str) -> None:
    assert DraVersion.loose(text).value == semver


@pytest.mark.parametrize("text", ["", "abc", "1.x", "v1.2.3"])
def test_not_a_version(text: str) -> None:
    with pytest.raises(ValueError, match="version"):
        DraVersion.loose(text)


@pytest.mark.parametrize(
    ("capability", "name"),
    [
        pytest.param((7, 0), "Volta", id="v100"),
        pytest.param((7, 5), "Turing", id="t4"),
        pytest.param((8, 0), "Ampere", id="a100"),
        pytest.param((8, 9), "Ada Lovelace", id="l4"),
        pytest.param((9, 0), "Hopper", id="h100"),
        pytest.param((10, 0), "Blackwell", id="b200"),
        pytest.param((99, 0), None, id="unknown"),
    ],
)
def test_architecture_names_are_go_nvlibs(capability: tuple[int, int], name: str | None) -> None:
    assert architecture(*capability) == name


def test_cuda_version() -> None:
    assert cuda_version(12040).value == "12.4.0"


@pytest.mark.parametrize(
    ("bus_id", "expected"),
    [
        pytest.param(
            "0000:3B:00.0", {"resource.kubernetes.io/pciBusID": "0000:3b:00.0"}, id="upper"
        ),
        pytest.param("3b:00.0", {}, id="no-domain"),
    ],
)
def test_pci_attributes_without_sysfs(
    bus_id: str, expected: dict[str, str], tmp_path: Path
) -> None:
    assert pci_attributes(bus_id, sys_root=tmp_path) == expected


def test_attributes_past_the_api_limits_are_dropped() -> None:
    info = DraDeviceInfo(
        attributes={"long": "x" * 65, **{f"a{i}": i for i in range(40)}},
        capacity={"memory": 1},
    )
    device = kube_device("example.com/dev", Device(id="d0", numa_nodes=(1,)), info)
    assert device.attributes is not None
    assert "long" not in device.attributes
    assert len(device.attributes) + 1 == MAX_ATTRIBUTES
    assert device.attributes["resource"].string == "example.com/dev"
    assert device.attributes["numa"].int == 1


@pytest.mark.parametrize(
    ("count", "sizes"),
    [
        pytest.param(0, [0], id="empty-pool-one-empty-slice"),
        pytest.param(128, [128], id="exactly-one"),
        pytest.param(129, [128, 1], id="one-over"),
        pytest.param(300, [128, 128, 44], id="three"),
    ],
)
def test_at_most_128_devices_per_slice(count: int, sizes: list[int]) -> None:
    devices = pool_devices(tree({"example.com/dev": [Device(id=f"d{i}") for i in range(count)]}))
    assert [len(c) for c in chunks(devices)] == sizes
    built = build_slices(PoolIdentity("drv.example.com", "n1", "uid"), devices, 7)
    assert {(s.spec.pool.generation, s.spec.pool.resourceSliceCount) for s in built} == {
        (7, len(sizes))
    }


@pytest.mark.parametrize(
    ("name", "index"),
    [
        pytest.param("n1-drv.example.com-0", 0, id="first"),
        pytest.param("n1-drv.example.com-12", 12, id="twelfth"),
        pytest.param("n1-drv.example.com-01", None, id="leading-zero"),
        pytest.param("n1-drv.example.com-x", None, id="not-a-number"),
        pytest.param("n2-drv.example.com-0", None, id="other-node"),
    ],
)
def test_slice_names(name: str, index: int | None) -> None:
    assert PoolIdentity("drv.example.com", "n1", "uid").slice_index(name) == index


def test_unhealthy_devices_are_left_out() -> None:
    devices = pool_devices(
        tree({"example.com/dev": [Device(id="ok"), Device(id="bad", health=Health.UNHEALTHY)]})
    )
    assert [d.name for d in devices] == ["ok"]


async def test_mig_devices_carry_profile_and_parent(run_nvidia: RunNvidia) -> None:
    backend, _ = simulated_backend("a100-mig", mig_strategy="mixed")
    recorder = await run_nvidia(backend)
    migs = [
        (resource, device)
        for resource, devices in recorder.latest.items()
        if resource.startswith("nvidia.com/mig-")
        for device in devices.values()
    ]
    assert migs
    resource, device = migs[0]
    attributes = backend.dra_device(resource, device).attributes
    assert attributes["type"] == "mig"
    assert str(attributes["parentUUID"]).startswith("GPU-")
    assert resource == f"nvidia.com/mig-{attributes['profile']}"
    assert isinstance(attributes["parentIndex"], int)
    assert "index" not in attributes


class _Namer:
    """Names GPUs as NVIDIA's driver does and leaves replicas out."""

    def dra_device_name(self, resource: str, device: Device) -> str | None:
        return None if device.id.endswith("::1") else f"gpu-{device.id[-1]}"


def test_the_backends_namer_names_the_devices() -> None:
    devices = pool_devices(
        tree({"nvidia.com/gpu": [Device(id="GPU-a0"), Device(id="GPU-a1"), Device(id="x::1")]}),
        namer=_Namer(),
    )
    assert [d.name for d in devices] == ["gpu-0", "gpu-1"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param(
            "xid 79: GPU has fallen off the bus", "xid-79-GPU-has-fallen-off-the-bus", id="xid"
        ),
        pytest.param(
            "node-vanished: /dev/ttyUSB0 is gone", "node-vanished-dev-ttyUSB0-is-gone", id="path"
        ),
        pytest.param("ecc", "ecc", id="kind-only"),
        pytest.param("other: " + "x" * 80, "other-" + "x" * 57, id="cut-to-63"),
        pytest.param("other: détail!", "other-d-tail", id="non-ascii"),
    ],
)
def test_taint_values_are_label_values(text: str, value: str) -> None:
    """Label value rules (apimachinery validation IsValidLabelValue): [A-Za-z0-9_.-],
    alphanumeric at both ends, at most 63 characters."""
    assert label_value(text) == value
    assert len(value) <= 63


class _XidKeyer:
    def dra_taint_key(self, resource: str, device: Device) -> str | None:
        return "gpu.nvidia.com/xid" if device.reason and device.reason.kind == "xid" else None


@pytest.mark.parametrize(
    ("reason", "key", "value"),
    [
        pytest.param(
            HealthReason(ReasonKind.XID, code=79), "gpu.nvidia.com/xid", "xid-79", id="vendor-key"
        ),
        pytest.param(
            HealthReason(ReasonKind.ECC), "drv.example.com/unhealthy", "ecc", id="default-key"
        ),
        pytest.param(None, "drv.example.com/unhealthy", "unknown", id="no-reason"),
    ],
)
def test_unhealthy_devices_are_tainted_with_the_backends_key(
    reason: HealthReason | None, key: str, value: str
) -> None:
    sick = Device(id="bad").with_health(Health.UNHEALTHY, reason)
    devices = pool_devices(
        tree({"example.com/dev": [Device(id="ok"), sick]}),
        taint=taint_maker("drv.example.com", _XidKeyer()),
    )
    assert [(d.name, d.taints) for d in devices] == [
        ("bad", [DeviceTaint(key=key, value=value, effect="NoSchedule")]),
        ("ok", None),
    ]


@pytest.mark.parametrize(
    ("count", "tainted", "sizes"),
    [
        pytest.param(200, (), [128, 72], id="none"),
        pytest.param(200, (0,), [64, 128, 8], id="first"),
        pytest.param(200, (63,), [64, 128, 8], id="last-of-64"),
        pytest.param(200, (64,), [64, 64, 72], id="65th-starts-a-limited-slice"),
        pytest.param(200, (100,), [100, 64, 36], id="in-the-second"),
    ],
)
def test_a_slice_with_a_tainted_device_holds_at_most_64(
    count: int, tainted: tuple[int, ...], sizes: list[int]
) -> None:
    devices = [
        KubeDevice(
            name=f"d{i}",
            taints=[DeviceTaint(key="k", effect="NoSchedule")] if i in tainted else None,
        )
        for i in range(count)
    ]
    assert [len(c) for c in chunks(devices)] == sizes


@pytest.mark.parametrize(
    ("nvml_brand", "published"),
    [
        pytest.param(14, "Nvidia", id="NVML_BRAND_NVIDIA"),
        pytest.param(2, "Tesla", id="NVML_BRAND_TESLA"),
        pytest.param(5, "GeForce", id="NVML_BRAND_GEFORCE"),
        pytest.param(12, "QuadroRTX", id="NVML_BRAND_QUADRO_RTX"),
        pytest.param(0, "Unknown", id="NVML_BRAND_UNKNOWN"),
        pytest.param(19, "Unknown", id="a value go-nvlib does not name"),
    ],
)
def test_the_brand_is_published_under_go_nvlibs_names(nvml_brand: int, published: str) -> None:
    """NVIDIA's driver publishes go-nvlib's GetBrandAsString (dra-driver-nvidia-gpu
    deviceinfo.go, GpuInfo.Attributes), so a selector on ``brand == "Nvidia"`` matches."""
    from accel_plugins.backends.nvidia.dra_attributes import brand_name

    assert brand_name(nvml_brand) == published
