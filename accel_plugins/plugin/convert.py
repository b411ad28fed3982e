"""Framework values to kubelet API messages. The only place that knows both."""

from __future__ import annotations

from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb
from accel_plugins.plugin.device import ContainerAllocation, Device


def device_message(device: Device) -> pb.Device:
    topology = None
    if device.numa_nodes:
        topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in device.numa_nodes])
    return pb.Device(ID=device.id, health=device.health.value, topology=topology)


def container_response(allocation: ContainerAllocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(allocation.envs),
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in allocation.mounts
        ],
        devices=[
            pb.DeviceSpec(
                container_path=n.container_path, host_path=n.host_path, permissions=n.permissions
            )
            for n in allocation.nodes
        ],
        annotations=dict(allocation.annotations),
        cdi_devices=[pb.CDIDevice(name=name) for name in allocation.cdi_devices],
    )
