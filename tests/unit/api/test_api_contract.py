"""The kubelet wire contract: names and field numbers exactly as upstream,
and the committed stubs exactly what hack/gen-protos produces."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf.descriptor import FileDescriptor

from accel_plugins.api import deviceplugin_v1beta1_pb2 as dp
from accel_plugins.api import dra_health_v1_pb2 as dra_health_v1
from accel_plugins.api import dra_health_v1alpha1_pb2 as dra_health
from accel_plugins.api import dra_v1_pb2 as dra_v1
from accel_plugins.api import dra_v1beta1_pb2 as dra_v1beta1
from accel_plugins.api import pluginregistration_v1_pb2 as reg
from accel_plugins.api import podresources_v1_pb2 as podres
from tests.support.repo import ROOT as REPO_ROOT

ROOT = REPO_ROOT

# message -> {field name: number}, transcribed from the upstream API definitions.
DEVICE_PLUGIN_V1BETA1 = {
    "DevicePluginOptions": {"pre_start_required": 1, "get_preferred_allocation_available": 2},
    "RegisterRequest": {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4},
    "Empty": {},
    "ListAndWatchResponse": {"devices": 1},
    "TopologyInfo": {"nodes": 1},
    "NUMANode": {"ID": 1},
    "Device": {"ID": 1, "health": 2, "topology": 3},
    "PreStartContainerRequest": {"devicesIDs": 1},
    "PreStartContainerResponse": {},
    "PreferredAllocationRequest": {"container_requests": 1},
    "ContainerPreferredAllocationRequest": {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    },
    "PreferredAllocationResponse": {"container_responses": 1},
    "ContainerPreferredAllocationResponse": {"deviceIDs": 1},
    "AllocateRequest": {"container_requests": 1},
    "ContainerAllocateRequest": {"devicesIDs": 1},
    "CDIDevice": {"name": 1},
    "AllocateResponse": {"container_responses": 1},
    "ContainerAllocateResponse": {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    },
    "Mount": {"container_path": 1, "host_path": 2, "read_only": 3},
    "DeviceSpec": {"container_path": 1, "host_path": 2, "permissions": 3},
}
POD_RESOURCES_V1 = {
    "AllocatableResourcesRequest": {},
    "AllocatableResourcesResponse": {"devices": 1, "cpu_ids": 2, "memory": 3},
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": 1},
    "PodResources": {"name": 1, "namespace": 2, "containers": 3},
    "ContainerResources": {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    },
    "ContainerMemory": {"memory_type": 1, "size": 2, "topology": 3},
    "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
    "TopologyInfo": {"nodes": 1},
    "NUMANode": {"ID": 1},
    "DynamicResource": {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4},
    "ClaimResource": {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4},
    "CDIDevice": {"name": 1},
    "GetPodResourcesRequest": {"pod_name": 1, "pod_namespace": 2},
    "GetPodResourcesResponse": {"pod_resources": 1},
}
PLUGIN_REGISTRATION_V1 = {
    "PluginInfo": {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4},
    "RegistrationStatus": {"plugin_registered": 1, "error": 2},
    "RegistrationStatusResponse": {},
    "InfoRequest": {},
}
# k8s.io/kubelet pkg/apis/dra/v1beta1/api.proto (kubelet 1.32+); v1 (1.34+) adds Device.share_id.
DRA_V1BETA1 = {
    "NodePrepareResourcesRequest": {"claims": 1},
    "NodePrepareResourcesResponse": {"claims": 1},
    "NodePrepareResourceResponse": {"devices": 1, "error": 2},
    "Device": {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4},
    "NodeUnprepareResourcesRequest": {"claims": 1},
    "NodeUnprepareResourcesResponse": {"claims": 1},
    "NodeUnprepareResourceResponse": {"error": 1},
    "Claim": {"namespace": 1, "uid": 2, "name": 3},
}
DRA_V1 = {**DRA_V1BETA1, "Device": {**DRA_V1BETA1["Device"], "share_id": 5}}
# k8s.io/kubelet pkg/apis/dra-health/v1alpha1/api.proto (fields 4 and 5 added after 1.34).
DRA_HEALTH_V1ALPHA1 = {
    "NodeWatchResourcesRequest": {},
    "DeviceIdentifier": {"pool_name": 1, "device_name": 2},
    "DeviceHealth": {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    },
    "NodeWatchResourcesResponse": {"devices": 1},
}
_DRA_PLUGIN = {
    "NodePrepareResources": ("NodePrepareResourcesRequest", "NodePrepareResourcesResponse", False),
    "NodeUnprepareResources": (
        "NodeUnprepareResourcesRequest",
        "NodeUnprepareResourcesResponse",
        False,
    ),
}
SERVICES = {
    "v1beta1.Registration": {"Register": ("RegisterRequest", "Empty", False)},
    "v1beta1.DevicePlugin": {
        "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
        "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
        "GetPreferredAllocation": (
            "PreferredAllocationRequest",
            "PreferredAllocationResponse",
            False,
        ),
        "Allocate": ("AllocateRequest", "AllocateResponse", False),
        "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
    },
    "v1.PodResourcesLister": {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse", False),
        "GetAllocatableResources": (
            "AllocatableResourcesRequest",
            "AllocatableResourcesResponse",
            False,
        ),
        "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse", False),
    },
    "pluginregistration.Registration": {
        "GetInfo": ("InfoRequest", "PluginInfo", False),
        "NotifyRegistrationStatus": ("RegistrationStatus", "RegistrationStatusResponse", False),
    },
    "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin": _DRA_PLUGIN,
    "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin": _DRA_PLUGIN,
    "v1alpha1.DRAResourceHealth": {
        "NodeWatchResources": ("NodeWatchResourcesRequest", "NodeWatchResourcesResponse", True),
    },
    "v1.DRAResourceHealth": {
        "NodeWatchResources": ("NodeWatchResourcesRequest", "NodeWatchResourcesResponse", True),
    },
}


@pytest.mark.parametrize(
    ("descriptor", "package", "messages"),
    [
        pytest.param(dp.DESCRIPTOR, "v1beta1", DEVICE_PLUGIN_V1BETA1, id="deviceplugin-v1beta1"),
        pytest.param(podres.DESCRIPTOR, "v1", POD_RESOURCES_V1, id="podresources-v1"),
        pytest.param(
            reg.DESCRIPTOR, "pluginregistration", PLUGIN_REGISTRATION_V1, id="pluginregistration"
        ),
        pytest.param(dra_v1.DESCRIPTOR, "k8s.io.kubelet.pkg.apis.dra.v1", DRA_V1, id="dra-v1"),
        pytest.param(
            dra_v1beta1.DESCRIPTOR,
            "k8s.io.kubelet.pkg.apis.dra.v1beta1",
            DRA_V1BETA1,
            id="dra-v1beta1",
        ),
        pytest.param(
            dra_health.DESCRIPTOR, "v1alpha1", DRA_HEALTH_V1ALPHA1, id="dra-health-v1alpha1"
        ),
        # k8s.io/kubelet pkg/apis/dra-health/v1/api.proto (Kubernetes 1.37): v1alpha1's
        # messages as of 1.36, field for field, in package v1.
        pytest.param(dra_health_v1.DESCRIPTOR, "v1", DRA_HEALTH_V1ALPHA1, id="dra-health-v1"),
    ],
)
def test_messages_match_upstream(
    descriptor: FileDescriptor, package: str, messages: dict[str, dict[str, int]]
) -> None:
    assert descriptor.package == package
    actual = {
        name: {f.name: f.number for f in message.fields}
        for name, message in descriptor.message_types_by_name.items()
    }
    assert actual == messages


def test_services_match_upstream() -> None:
    actual = {}
    descriptors = (
        dp.DESCRIPTOR,
        podres.DESCRIPTOR,
        reg.DESCRIPTOR,
        dra_v1.DESCRIPTOR,
        dra_v1beta1.DESCRIPTOR,
        dra_health.DESCRIPTOR,
        dra_health_v1.DESCRIPTOR,
    )
    for descriptor in descriptors:
        for service in descriptor.services_by_name.values():
            actual[service.full_name] = {
                m.name: (m.input_type.name, m.output_type.name, m.server_streaming)
                for m in service.methods
            }
    assert actual == SERVICES


@pytest.mark.parametrize("module", [dra_health, dra_health_v1], ids=["v1alpha1", "v1"])
def test_dra_health_status_values_match_upstream(module: ModuleType) -> None:
    assert dict(module.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


@pytest.mark.parametrize("module", [dra_v1, dra_v1beta1], ids=["v1", "v1beta1"])
def test_dra_claim_maps_are_keyed_by_uid(module: ModuleType) -> None:
    # Both responses map the claim UID (a string) to one answer per claim.
    for name in ("NodePrepareResourcesResponse", "NodeUnprepareResourcesResponse"):
        field = module.DESCRIPTOR.message_types_by_name[name].fields_by_name["claims"]
        entry = field.message_type
        assert entry.GetOptions().map_entry
        assert entry.fields_by_name["key"].type == entry.fields_by_name["key"].TYPE_STRING


def test_dra_v1_share_id_is_optional() -> None:
    # proto3 `optional`: presence is tracked, so an unset share_id is not sent as "".
    assert not dra_v1.Device().HasField("share_id")
    assert dra_v1.Device(share_id="").HasField("share_id")


def test_map_fields_are_string_maps() -> None:
    response = dp.ContainerAllocateResponse(envs={"A": "1"}, annotations={"k": "v"})
    assert dict(response.envs) == {"A": "1"}
    assert dict(response.annotations) == {"k": "v"}


def test_committed_stubs_match_generator(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen-protos"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    committed = ROOT / "accel_plugins" / "api"
    names = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".py", ".pyi"))
    generated = sorted(p.name for p in committed.iterdir() if "_pb2" in p.name)
    assert names == sorted([*generated, "__init__.py"])  # loader.py is written by hand
    _, mismatch, errors = filecmp.cmpfiles(committed, tmp_path, names, shallow=False)
    assert not mismatch, f"stale stubs, run hack/gen-protos: {mismatch}"
    assert not errors, f"unreadable stubs: {errors}"
