"""What the real kubelet recorded about a pod's devices, read from its own checkpoints.

The device manager's checkpoint (kubernetes pkg/kubelet/cm/devicemanager/checkpoint/
checkpoint.go) lists per pod and container: the resource, the device IDs by NUMA node,
and the plugin's Allocate answer (``AllocResp``, a serialized ContainerAllocateResponse,
base64 in the JSON).

The DRA manager's (pkg/kubelet/cm/dra/state, ``checkpoint.dra.kubelet.k8s.io/v1``) lists
per prepared claim each driver's devices as the driver's NodePrepareResources answered
them: pool, device, the share ID of a shared device, and the CDI device IDs the kubelet
hands the runtime for the claim's containers.
"""

from __future__ import annotations

import json
from base64 import b64decode
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.node.cluster import KUBELET_ROOT

if TYPE_CHECKING:
    from lightkube import Client

CHECKPOINT = KUBELET_ROOT / "device-plugins" / "kubelet_internal_checkpoint"
DRA_CHECKPOINT = KUBELET_ROOT / "dra_manager_state"


@dataclass(frozen=True)
class Allocation:
    container: str
    resource: str
    device_ids: frozenset[str]
    answer: Any  # deviceplugin v1beta1 ContainerAllocateResponse


def allocations(kube: Client, pod: str, namespace: str) -> list[Allocation]:
    """The kubelet's allocations for the pod ``namespace/pod`` (by its UID)."""
    from lightkube.resources.core_v1 import Pod

    from accel_plugins.api import deviceplugin_v1beta1_pb2 as pb

    metadata = kube.get(Pod, pod, namespace=namespace).metadata
    assert metadata is not None
    checkpoint = json.loads(CHECKPOINT.read_text())
    return [
        Allocation(
            entry["ContainerName"],
            entry["ResourceName"],
            frozenset(i for ids in entry["DeviceIDs"].values() for i in ids),
            pb.ContainerAllocateResponse.FromString(b64decode(entry["AllocResp"])),
        )
        for entry in checkpoint["Data"]["PodDeviceEntries"]
        if entry["PodUID"] == metadata.uid
    ]


@dataclass(frozen=True)
class PreparedDevice:
    driver: str
    pool: str
    device: str
    share_id: str  # "" for a device that is not shared
    cdi_device_ids: tuple[str, ...]


def prepared_devices(claim_uid: str) -> list[PreparedDevice]:
    """The devices the kubelet recorded as prepared for the claim ``claim_uid``."""
    data = json.loads(json.loads(DRA_CHECKPOINT.read_text())["Data"])
    return [
        PreparedDevice(
            driver,
            device["PoolName"],
            device["DeviceName"],
            device.get("ShareID") or "",
            tuple(device.get("CDIDeviceIDs") or ()),
        )
        for claim in data["ClaimInfoStateList"]
        if claim["ClaimUID"] == claim_uid
        for driver, state in claim["DriverState"].items()
        for device in state["Devices"]
    ]
