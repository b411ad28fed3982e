"""Framework values to kubelet API messages. The only place that knows both."""

from __future__ import annotations

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.plugin.device import ContainerAllocation, Device


def device_message(device: Device) -> pb.Device:
    topology = None
    if device.numa_nodes:
        topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in device.numa_nodes])
    return pb.Device(ID=device.id, health=device.health.value, topology=topology)


def fill_container_response(
    response: pb.ContainerAllocateResponse, allocation: ContainerAllocation
) -> None:
    """Write ``allocation`` into ``response`` in place.

    Filled field by field with ``add`` rather than built from keyword arguments
    and copied into the AllocateResponse: a third of Allocate's own time.
    """
    if allocation.envs:
        response.envs.update(allocation.envs)
    add_mount = response.mounts.add
    for m in allocation.mounts:
        add_mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
    add_device = response.devices.add
    for node in allocation.nodes:
        add_device(
            container_path=node.container_path,
            host_path=node.host_path,
            permissions=node.permissions,
        )
    if allocation.annotations:
        response.annotations.update(allocation.annotations)
    add_cdi = response.cdi_devices.add
    for name in allocation.cdi_devices:
        add_cdi(name=name)


def container_response(allocation: ContainerAllocation) -> pb.ContainerAllocateResponse:
    response = pb.ContainerAllocateResponse()
    fill_container_response(response, allocation)
    return response
