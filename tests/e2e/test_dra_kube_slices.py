"""KubeSlicePublisher against a real kube-apiserver (v1.34, resource.k8s.io/v1).

The API server validates every slice we write (names, the 128-device limit,
attribute types and lengths, the owner), so these tests also check that what
the slice builder makes is valid ResourceSlice content.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.resource_v1 import (
    CELDeviceSelector,
    DeviceClassSpec,
    DeviceSelector,
    ResourcePool,
    ResourceSliceSpec,
)
from lightkube.models.resource_v1 import Device as KubeDevice
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import DeviceClass, ResourceSlice
from prometheus_client import CollectorRegistry

from accel_plugins.backends.nvidia.dra_attributes import DRIVER_NAME, cuda_version
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.simulate.simulate import (
    SIMULATED_CUDA_DRIVER_VERSION,
    SIMULATED_DRIVER_VERSION,
)
from accel_plugins.dra.kube import KubeSlicePublisher
from accel_plugins.dra.model import dra_device_name
from accel_plugins.plugin.device import Device, DeviceTree, Health, tree
from accel_plugins.plugin.dra_attributes import DraVersion
from tests.dra_kube_fixtures import NodeClient
from tests.nvidia_fixtures import RunNvidia, simulated_backend

GENERIC = "generic.accel-plugins.io"
pytestmark = pytest.mark.timeout(120)


async def slices(kube: AsyncClient, node: str, driver: str) -> list[ResourceSlice]:
    """The node's slices of ``driver``, ``<node>-<driver>-0`` upwards, each read by GET.

    GETs, not a list: a list may be served from the watch cache a moment
    behind the write just made, a GET is a quorum read.
    """
    found: list[ResourceSlice] = []
    while True:
        try:
            found.append(await kube.get(ResourceSlice, f"{node}-{driver}-{len(found)}"))
        except ApiError as exc:
            if exc.status.code == 404:
                return found
            raise


def attrs(device: KubeDevice) -> dict[str, object]:
    """A device's attributes as plain values (the server answers {"string": ...} maps)."""
    return {name: next(iter(value.values())) for name, value in (device.attributes or {}).items()}


def versions(found: list[ResourceSlice]) -> dict[str, str | None]:
    return {(s.metadata.name or ""): s.metadata.resourceVersion for s in found if s.metadata}


def devices_of(found: list[ResourceSlice]) -> list[str]:
    return [d.name for s in found for d in s.spec.devices or []]


def units(count: int, *, resource: str = "example.com/serial", unhealthy: int = -1) -> DeviceTree:
    return tree(
        {
            resource: [
                Device(
                    id=f"unit{i:03d}",
                    numa_nodes=(i % 2,),
                    health=Health.UNHEALTHY if i == unhealthy else Health.HEALTHY,
                )
                for i in range(count)
            ]
        }
    )


async def synced(pub: KubeSlicePublisher, devices: DeviceTree) -> None:
    """Publish and wait for the background retry, if any.

    A node identity may be refused an update of the slice it created a moment
    before: the Node authorizer learns of new slices through a watch, so for a
    few milliseconds it sees no relationship between the node and the slice
    (403). The publisher retries; the chart's ServiceAccount has no such race.
    """
    await pub.publish(devices)
    await pub.wait_in_sync()


def publisher(client: AsyncClient, node: str, **kwargs: object) -> KubeSlicePublisher:
    return KubeSlicePublisher(
        client,
        driver=str(kwargs.pop("driver", GENERIC)),
        node=node,
        registry=CollectorRegistry(),
        **kwargs,  # type: ignore[arg-type]
    )


async def test_simulated_gpus_publish_nvidia_attributes(
    kube: AsyncClient, kube_node: str, node_client: NodeClient, run_nvidia: RunNvidia
) -> None:
    backend, _ = simulated_backend("dgx-h100")
    recorder = await run_nvidia(backend)
    pub = publisher(
        node_client(kube_node), kube_node, driver=DRIVER_NAME, describe=backend.dra_device
    )
    await synced(pub, recorder.latest)
    assert pub.in_sync

    (only,) = await slices(kube, kube_node, DRIVER_NAME)
    node = await kube.get(Node, kube_node)
    assert only.metadata is not None
    assert node.metadata is not None
    assert only.metadata.name == f"{kube_node}-{DRIVER_NAME}-0"
    (owner,) = only.metadata.ownerReferences or []
    assert (owner.kind, owner.name, owner.uid) == ("Node", kube_node, node.metadata.uid)
    assert only.spec.nodeName == kube_node
    assert only.spec.pool == ResourcePool(name=kube_node, generation=1, resourceSliceCount=1)
    gpus = only.spec.devices or []
    assert len(gpus) == 8
    first = attrs(gpus[0])
    assert first["type"] == "gpu"
    assert first["productName"] == "NVIDIA H100 80GB HBM3"
    assert first["architecture"] == "Hopper"
    assert first["cudaComputeCapability"] == "9.0.0"
    assert first["driverVersion"] == DraVersion.loose(SIMULATED_DRIVER_VERSION).value
    assert first["cudaDriverVersion"] == cuda_version(SIMULATED_CUDA_DRIVER_VERSION).value
    assert first["resource"] == "nvidia.com/gpu"
    assert str(first["resource.kubernetes.io/pciBusID"]).count(":") == 2
    assert gpus[0].name == dra_device_name(str(first["uuid"]))
    facts = {gpu_facts(d).uuid: gpu_facts(d) for d in recorder.latest["nvidia.com/gpu"].values()}
    memory = facts[str(first["uuid"])].memory_mib << 20
    assert (gpus[0].capacity or {})["memory"] == {"value": str(memory)}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param(
            'device.driver == "gpu.nvidia.com" && '
            'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',
            True,
            id="product",
        ),
        pytest.param(
            'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
            True,
            id="compute-capability-semver",
        ),
        pytest.param(
            'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) > 0',
            True,
            id="memory-quantity",
        ),
    ],
)
async def test_device_class_with_cel_on_our_attributes_is_accepted(
    kube: AsyncClient, selector: str, matches: bool
) -> None:
    """The API server compiles a DeviceClass's CEL at create time (type errors refused)."""
    name = f"sel-{abs(hash(selector)) % 10**8}.example.com"
    created = await kube.create(
        DeviceClass(
            metadata=ObjectMeta(name=name),
            spec=DeviceClassSpec(
                selectors=[DeviceSelector(cel=CELDeviceSelector(expression=selector))]
            ),
        )
    )
    assert created.metadata is not None
    await kube.delete(DeviceClass, name)


async def test_200_generic_devices_make_two_slices(
    kube: AsyncClient, kube_node: str, node_client: NodeClient
) -> None:
    pub = publisher(node_client(kube_node), kube_node)
    await synced(pub, units(200))
    found = await slices(kube, kube_node, GENERIC)
    assert [len(s.spec.devices or []) for s in found] == [128, 72]
    assert {(s.spec.pool.generation, s.spec.pool.resourceSliceCount) for s in found} == {(1, 2)}
    assert devices_of(found) == [f"unit{i:03d}" for i in range(200)]

    await synced(pub, units(100))  # shrinks to one slice: the second is deleted
    found = await slices(kube, kube_node, GENERIC)
    assert [len(s.spec.devices or []) for s in found] == [100]
    assert found[0].spec.pool == ResourcePool(name=kube_node, generation=2, resourceSliceCount=1)


@pytest.mark.parametrize(
    ("change", "generation", "published"),
    [
        pytest.param(lambda: units(3), 1, 3, id="same-tree-no-write"),
        pytest.param(lambda: units(4), 2, 4, id="hotplug"),
        pytest.param(lambda: units(2), 2, 2, id="removal"),
        pytest.param(lambda: units(3, unhealthy=1), 2, 2, id="unhealthy-left-out"),
    ],
)
async def test_generation_bumps_on_every_change_only(
    kube: AsyncClient,
    kube_node: str,
    node_client: NodeClient,
    change: Callable[[], DeviceTree],
    generation: int,
    published: int,
) -> None:
    pub = publisher(node_client(kube_node), kube_node)
    await synced(pub, units(3))
    await synced(pub, change())
    (only,) = await slices(kube, kube_node, GENERIC)
    assert only.spec.pool.generation == generation == pub.generation
    assert len(only.spec.devices or []) == published


async def test_restart_with_same_devices_writes_nothing(
    kube: AsyncClient, kube_node: str, node_client: NodeClient
) -> None:
    first = publisher(node_client(kube_node), kube_node)
    await synced(first, units(150))
    await first.close()  # slices stay
    before = versions(await slices(kube, kube_node, GENERIC))

    second = publisher(node_client(kube_node), kube_node)
    await synced(second, units(150))
    after = versions(await slices(kube, kube_node, GENERIC))
    assert after == before
    assert second.generation == 1

    await synced(second, units(151))
    assert second.generation == 2


async def test_node_cannot_write_another_nodes_slices(
    kube: AsyncClient, kube_node: str, node_client: NodeClient
) -> None:
    """NodeRestriction: a kubelet's identity writes only slices with its own nodeName."""
    other = f"{kube_node}-other"
    client = node_client(kube_node)
    foreign = ResourceSlice(
        metadata=ObjectMeta(name=f"{other}-{GENERIC}-0"),
        spec=ResourceSliceSpec(
            driver=GENERIC,
            nodeName=other,
            pool=ResourcePool(name=other, generation=1, resourceSliceCount=1),
            devices=[],
        ),
    )
    with pytest.raises(ApiError) as refused:
        await client.create(foreign)
    assert refused.value.status.code == 403

    # The publisher run with the wrong identity fails, counts it, and does not raise.
    pub = publisher(client, other)
    await pub.publish(units(1))
    assert not pub.in_sync
    assert pub.failures._value.get() >= 1
    await pub.close()
    assert await slices(kube, other, GENERIC) == []


async def test_hotplug_reaches_the_api_server_quickly(
    kube: AsyncClient, kube_node: str, node_client: NodeClient
) -> None:
    """One changed device: one slice replaced (loopback); the issue's target is 100 ms."""
    pub = publisher(node_client(kube_node), kube_node)
    await synced(pub, units(64))
    timings = []
    for count in range(65, 75):
        start = time.perf_counter()
        await synced(pub, units(count))
        timings.append(time.perf_counter() - start)
    timings.sort()
    p50, worst = timings[5] * 1000, timings[-1] * 1000
    print(f"slice update after hotplug: p50 {p50:.1f} ms, max {worst:.1f} ms")
    assert timings[5] < 0.1


async def test_generic_backend_devices_with_udev_properties(
    kube: AsyncClient, kube_node: str, node_client: NodeClient, tmp_path: Path
) -> None:
    """Attributes from a real GenericBackend over a fake /dev and a fake udev database."""
    from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
    from accel_plugins.backends.generic.config import parse_config
    from accel_plugins.backends.generic.eventsource import EventPaths
    from accel_plugins.testing.host import FakeHost

    host = FakeHost(tmp_path / "host")
    for i in range(3):
        host.node(f"/dev/ttyUSB{i}", major=188, minor=i)
    host.sys_device("pci0000:00/0000:00:14.0/usb1/1-1/ttyUSB0", dev=(188, 0), numa_node=0)
    udev = tmp_path / "udev-data"
    udev.mkdir()
    (udev / "c188:0").write_text("E:ID_VENDOR_ID=0403\nE:ID_MODEL_ID=6001\nE:ID_SERIAL_SHORT=A1\n")
    config = parse_config(
        "devices:\n- name: serial\n  groups:\n  - paths:\n    - path: /dev/ttyUSB*\n"
    )
    settings = GenericSettings(
        dev_root=host.dev, sys_root=host.sys, event_paths=EventPaths(udev_data=udev)
    )
    backend = GenericBackend(config, settings)
    pub = publisher(node_client(kube_node), kube_node, describe=backend.dra_device)
    await synced(pub, backend.scan())
    (only,) = await slices(kube, kube_node, GENERIC)
    by_path = {str(attrs(d)["path"]): attrs(d) for d in only.spec.devices or []}
    assert set(by_path) == {"/dev/ttyUSB0", "/dev/ttyUSB1", "/dev/ttyUSB2"}
    first = by_path["/dev/ttyUSB0"]
    assert (first["vendorID"], first["productID"]) == ("0403", "6001")
    assert first["ID_SERIAL_SHORT"] == "A1"
    assert first["resource"] == "accel-plugins.io/serial"
    assert first["resource.kubernetes.io/pcieRoot"] == "pci0000:00"
    assert first["numa"] == 0
    assert "vendorID" not in by_path["/dev/ttyUSB1"]
