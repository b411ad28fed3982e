"""ResourceApi: v1's shape inside, each served version at the wire.

v1beta1 wraps a device's fields in ``basic`` (kubernetes/kubernetes
staging/src/k8s.io/api/resource/v1beta1/types.go: ``Device{Name, Basic *BasicDevice}``);
v1beta2 and v1 carry them on the device itself.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube.resources.resource_v1 import ResourceSlice

from accel_plugins.dra.kube.api import V1, V1BETA1, V1BETA2, ResourceApi

SPEC: dict[str, Any] = {
    "driver": "drv.example.com",
    "nodeName": "n1",
    "pool": {"name": "n1", "generation": 3, "resourceSliceCount": 1},
}
DEVICE = {
    "name": "d0",
    "attributes": {"numa": {"int": 1}},
    "capacity": {"memory": {"value": "80Gi"}},
    "taints": [{"key": "drv.example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}],
}
V1BETA1_DEVICE = {
    "name": "d0",
    "basic": {
        "attributes": {"numa": {"int": 1}},
        "capacity": {"memory": {"value": "80Gi"}},
        "taints": [{"key": "drv.example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}],
    },
}


def v1_slice() -> ResourceSlice:
    data = {"metadata": {"name": "n1-drv-0"}, "spec": {**SPEC, "devices": [DEVICE]}}
    return cast(ResourceSlice, ResourceSlice.from_dict(data))


@pytest.mark.parametrize(
    ("api", "device"),
    [
        pytest.param(V1, DEVICE, id="v1"),
        pytest.param(V1BETA2, DEVICE, id="v1beta2-same-shape"),
        pytest.param(V1BETA1, V1BETA1_DEVICE, id="v1beta1-basic"),
    ],
)
def test_a_slice_at_the_wire_and_back(api: ResourceApi, device: dict[str, Any]) -> None:
    wire = api.to_wire(v1_slice())
    assert isinstance(wire, api.slice_type)
    sent = wire.to_dict()
    assert sent["apiVersion"] == f"resource.k8s.io/{api.version}"
    assert sent["spec"]["devices"] == [device]
    assert sent["spec"]["pool"] == SPEC["pool"]
    assert api.from_wire(wire).to_dict() == v1_slice().to_dict()
