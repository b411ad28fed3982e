"""The kit's pure rules, each against a valid input and deliberately broken ones.

Limits and formats from kubernetes/kubernetes staging/src/k8s.io/api/resource/v1/
types.go (ResourceSliceMaxDevices, ResourceSliceMaxAttributesAndCapacitiesPerDevice,
DeviceAttributeMaxValueLength, QualifiedName, DeviceTaint) and the CDI spec
(cncf-tags/container-device-interface SPEC.md, pkg/parser ValidateDeviceName).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.conformance import cdi_files, slice_rules


def device(name: str = "gpu-0", **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def slice_of(
    *devices: dict[str, Any], pool: str = "n1", gen: int = 1, count: int = 1
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"s-{pool}-{gen}-{len(devices)}"},
        "spec": {
            "pool": {"name": pool, "generation": gen, "resourceSliceCount": count},
            "devices": list(devices),
        },
    }


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        pytest.param(slice_of(device(attributes={"index": {"int": 0}})), "", id="valid"),
        pytest.param(
            slice_of(*[device(f"d{i}") for i in range(129)]), "129 devices", id="129-devices"
        ),
        pytest.param(
            slice_of(
                *[device(f"d{i}", taints=[{"key": "k", "effect": "NoSchedule"}]) for i in range(65)]
            ),
            "at most 64 with taints or counters",
            id="65-tainted-devices",
        ),
        pytest.param(slice_of(device("GPU_0")), "not a DNS label", id="device-name"),
        pytest.param(
            slice_of(device(attributes={f"a{i}": {"int": i} for i in range(33)})),
            "33 attributes",
            id="33-attributes",
        ),
        pytest.param(
            slice_of(device(attributes={"a": {"int": 1, "string": "x"}})),
            "2 values",
            id="two-types",
        ),
        pytest.param(
            slice_of(device(attributes={"a": {"string": "x" * 65}})),
            "65 characters",
            id="long-string",
        ),
        pytest.param(
            slice_of(device(attributes={"v": {"version": "1.2"}})),
            "not a semantic version",
            id="version",
        ),
        pytest.param(
            slice_of(device(attributes={"9lives": {"bool": True}})),
            "not a C identifier",
            id="attr-name",
        ),
        pytest.param(
            slice_of(device(attributes={"Example.COM/x": {"bool": True}})),
            "not a DNS subdomain",
            id="attr-domain",
        ),
    ],
)
def test_slice_limits(item: dict[str, Any], problem: str) -> None:
    found = "\n".join(slice_rules.slice_problems(item))
    assert (problem in found and problem != "") if problem else found == ""


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        pytest.param([slice_of(device("a"), count=1)], "", id="one-slice"),
        pytest.param(
            [slice_of(device("a"), count=2), slice_of(device("b"), count=2)], "", id="two-slices"
        ),
        pytest.param(
            [slice_of(device("a"), count=2)], "resourceSliceCount says [2]", id="one-missing"
        ),
        pytest.param(
            [slice_of(device("a"), gen=1), slice_of(device("b"), gen=2)],
            "generations [1, 2]",
            id="two-generations",
        ),
        pytest.param(
            [slice_of(device("a"), count=2), slice_of(device("a"), count=2)],
            "in two slices",
            id="duplicate-device",
        ),
    ],
)
def test_pool_consistency(items: list[dict[str, Any]], problem: str) -> None:
    found = "\n".join(slice_rules.pool_problems(items))
    assert problem in found if problem else found == ""


@pytest.mark.parametrize(
    ("taint", "problem"),
    [
        pytest.param(
            {"key": "example.com/unhealthy", "value": "xid-79", "effect": "NoSchedule"},
            "",
            id="valid",
        ),
        pytest.param({"key": "k", "effect": "None"}, "", id="effect-none"),
        pytest.param(
            {"key": "k", "effect": "PreferNoSchedule"}, "taint effect", id="prefer-no-schedule"
        ),
        pytest.param({"key": "-k", "effect": "NoExecute"}, "taint key", id="bad-key"),
        pytest.param(
            {"key": "k", "value": "a b", "effect": "NoExecute"}, "taint value", id="bad-value"
        ),
    ],
)
def test_taints(taint: dict[str, Any], problem: str) -> None:
    found = "\n".join(slice_rules.taint_problems([slice_of(device(taints=[taint]))]))
    assert problem in found if problem else found == ""


def spec(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cdiVersion": "0.6.0",
        "kind": "example.com/gpu",
        "devices": [{"name": "claim-1_gpu.0", "containerEdits": {"env": ["A=1"]}}],
    }
    doc.update(fields)
    return doc


@pytest.mark.parametrize(
    ("doc", "cdi_id", "problem"),
    [
        pytest.param(spec(), "example.com/gpu=claim-1_gpu.0", "", id="defined"),
        pytest.param(spec(), "example.com/gpu=claim-2", "no spec in", id="not-defined"),
        pytest.param(spec(), "claim-1_gpu.0", "not a qualified CDI name", id="unqualified"),
        pytest.param(
            spec(cdiVersion="0.9.9"), "example.com/gpu=claim-1_gpu.0", "cdiVersion", id="version"
        ),
        pytest.param(spec(kind="gpu"), "example.com/gpu=claim-1_gpu.0", "no spec in", id="kind"),
        pytest.param(
            spec(devices=[{"name": "claim-1_gpu.0", "containerEdits": {"env": ["NOEQUALS"]}}]),
            "example.com/gpu=claim-1_gpu.0",
            "not KEY=VALUE",
            id="env",
        ),
        pytest.param(
            spec(
                devices=[
                    {"name": "claim-1_gpu.0", "containerEdits": {"mounts": [{"hostPath": "/x"}]}}
                ]
            ),
            "example.com/gpu=claim-1_gpu.0",
            "needs hostPath and containerPath",
            id="mount",
        ),
    ],
)
def test_cdi_ids_are_defined_by_valid_specs(
    tmp_path: Path, doc: dict[str, Any], cdi_id: str, problem: str
) -> None:
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    found = "\n".join(cdi_files.undefined([cdi_id], [tmp_path]))
    assert problem in found if problem else found == ""
