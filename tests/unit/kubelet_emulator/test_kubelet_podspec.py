"""Pod manifests for the emulator's admission: parsing errors (file, field, reason), the API
server's validation of extended resources, and the pod's effective device request.

The device-request table is the kubelet's ``TestGetPodDeviceRequest``
(``pkg/kubelet/cm/devicemanager/topology_hints_test.go``), under its names.
"""

from __future__ import annotations

import textwrap
from fractions import Fraction
from pathlib import Path

import pytest

from accel_plugins.errors import ConfigError
from accel_plugins.kubelet_emulator.podspec import load_pods, parse_pods
from accel_plugins.util.quantity import parse_quantity

POD = """
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml}
spec:
  initContainers:
    - name: setup
      image: busybox
      resources: {limits: {example.com/widget: 2}}
    - name: proxy
      restartPolicy: Always
      resources: {limits: {example.com/widget: "1"}}
  containers:
    - name: main
      resources:
        limits: {example.com/widget: 2, cpu: 500m, memory: 1Gi}
        requests: {example.com/widget: 2, cpu: 250m}
    - name: sidecar
"""


def test_a_pod_manifest() -> None:
    [pod] = parse_pods(POD, "pod.yaml")

    assert (pod.key, pod.source) == ("ml/trainer", "pod.yaml")
    assert [c.name for c in pod.all_containers] == ["setup", "proxy", "main", "sidecar"]
    assert [c.kind for c in pod.all_containers] == [
        "init container",
        "init container (sidecar)",
        "container",
        "container",
    ]
    assert [c.path for c in pod.all_containers] == [
        "spec.initContainers[0]",
        "spec.initContainers[1]",
        "spec.containers[0]",
        "spec.containers[1]",
    ]
    main = pod.containers[0]
    assert main.devices == {"example.com/widget": 2}  # cpu and memory are not extended
    assert main.limits["memory"].value == 1024**3
    assert pod.invalid() == []
    assert pod.resources == ["example.com/widget"]


def test_documents_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(
        "---\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\n"
        "---\nmetadata: {name: b}\nspec: {containers: [{name: c}]}\n"
    )
    pods = load_pods(path)
    assert [(p.key, p.source) for p in pods] == [
        ("default/a", f"{path} (document 1)"),
        ("default/b", f"{path} (document 3)"),
    ]


def _pod(containers: str, init: str = "") -> str:
    return textwrap.dedent(
        f"""
        metadata: {{name: p}}
        spec:
          initContainers: {init or "[]"}
          containers: {containers}
        """
    )


PARSE_ERRORS = {
    "not YAML": ("a: [", "", "not valid YAML: line 1, column 5"),
    "empty file": ("", "", "no pod in the file"),
    "a list": ("- 1", "(top level)", "expected a mapping, got a list"),
    "another kind": (
        "kind: Deployment\nmetadata: {name: p}",
        "kind",
        "expected Pod, got 'Deployment'",
    ),
    "another version": ("apiVersion: v2\nkind: Pod", "apiVersion", "expected v1, got 'v2'"),
    "no metadata": ("spec: {}", "metadata", "expected a mapping, got nothing"),
    "no name": ("metadata: {}", "metadata.name", "expected a non-empty string, got nothing"),
    "bad name": ("metadata: {name: My_Pod}", "metadata.name", "'My_Pod' is not a DNS-1123"),
    "bad namespace": (
        "metadata: {name: p, namespace: a.b}",
        "metadata.namespace",
        "'a.b' is not a DNS-1123 label",
    ),
    "no spec": ("metadata: {name: p}", "spec", "expected a mapping, got nothing"),
    "no containers": (_pod("[]"), "spec.containers", "a pod needs at least one container"),
    "containers not a list": (_pod("{name: c}"), "spec.containers", "expected a list"),
    "container without a name": (
        _pod("[{image: x}]"),
        "spec.containers[0].name",
        "expected a non-empty string, got nothing",
    ),
    "duplicate names": (
        _pod("[{name: c}]", init="[{name: c}]"),
        "spec.containers[0].name",
        "duplicate container name 'c' (also spec.initContainers[0])",
    ),
    "resources not a mapping": (
        _pod("[{name: c, resources: [1]}]"),
        "spec.containers[0].resources",
        "expected a mapping, got a list",
    ),
    "no quantity": (
        _pod("[{name: c, resources: {limits: {example.com/w: two}}}]"),
        "spec.containers[0].resources.limits[example.com/w]",
        "'two' is not a quantity",
    ),
    "a boolean quantity": (
        _pod("[{name: c, resources: {requests: {example.com/w: yes}}}]"),
        "spec.containers[0].resources.requests[example.com/w]",
        "True is not a quantity",
    ),
    "restartPolicy on an app container": (
        _pod("[{name: c, restartPolicy: Always}]"),
        "spec.containers[0].restartPolicy",
        "'Always' is not supported (only Always, on an init container)",
    ),
    "duplicate keys": ("metadata: {name: a, name: b}", "", "duplicate key 'name'"),
}


@pytest.mark.parametrize(("text", "field", "reason"), PARSE_ERRORS.values(), ids=PARSE_ERRORS)
def test_parse_errors_name_the_file_the_field_and_the_reason(
    text: str, field: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_pods(text, "pod.yaml")
    assert raised.value.source == "pod.yaml"
    assert raised.value.field == field
    assert reason in raised.value.reason


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the pod manifest"):
        load_pods(tmp_path / "missing.yaml")


INVALID = {
    "request differs from limit": (
        "{limits: {example.com/w: 2}, requests: {example.com/w: 1}}",
        [
            'spec.containers[0].resources.requests[example.com/w]: Invalid value: "1": '
            "must be equal to example.com/w limit of 2"
        ],
    ),
    "request without a limit": (
        "{requests: {example.com/w: 1}}",
        [
            "spec.containers[0].resources.limits: Required value: "
            "Limit must be set for non overcommitable resources"
        ],
    ),
    "not an integer": (
        "{limits: {example.com/w: 500m}}",
        [
            'spec.containers[0].resources.limits[example.com/w]: Invalid value: "500m": '
            "must be an integer"
        ],
    ),
    "negative": (
        "{limits: {example.com/w: -1}}",
        [
            'spec.containers[0].resources.limits[example.com/w]: Invalid value: "-1": '
            "must be greater than or equal to 0"
        ],
    ),
    "cpu may be overcommitted": ("{limits: {cpu: 2}, requests: {cpu: 500m}}", []),
    "limit alone": ("{limits: {example.com/w: 3}}", []),
}


@pytest.mark.parametrize(("resources", "problems"), INVALID.values(), ids=INVALID)
def test_api_server_validation(resources: str, problems: list[str]) -> None:
    [pod] = parse_pods(_pod(f"[{{name: c, resources: {resources}}}]"), "pod.yaml")
    assert pod.invalid() == problems


QUANTITIES = {
    "int": (2, Fraction(2)),
    "float": (1.5, Fraction(3, 2)),
    "string": ("3", Fraction(3)),
    "milli": ("500m", Fraction(1, 2)),
    "kilo": ("2k", Fraction(2000)),
    "kibi": ("1Ki", Fraction(1024)),
    "exponent": ("1e3", Fraction(1000)),
    "signed": ("+4", Fraction(4)),
}


@pytest.mark.parametrize(("text", "value"), QUANTITIES.values(), ids=QUANTITIES)
def test_quantities(text: object, value: Fraction) -> None:
    assert parse_quantity(text) == value


# -- TestGetPodDeviceRequest -----------------------------------------------------------------


def _container(name: str, **counts: int) -> str:
    limits = ", ".join(f"example.com/{r}: {n}" for r, n in counts.items())
    return f"{{name: {name}, resources: {{limits: {{cpu: 2, memory: 1G, {limits}}}}}}}"


DEVICE_REQUESTS = {
    "Init container requests device plugin resource": (
        [_container("i0", gpu=2)],
        [_container("c0")],
        {"example.com/gpu": 2},
    ),
    "Init containers request device plugin resource": (
        [_container("i0", gpu=2), _container("i1", gpu=4)],
        [_container("c0")],
        {"example.com/gpu": 4},
    ),
    "User container requests device plugin resource": (
        [],
        [_container("c0", gpu=2)],
        {"example.com/gpu": 2},
    ),
    "Init containers and user containers request the same amount of device plugin resources": (
        [_container("i0", gpu=2, nic=2), _container("i1", gpu=2, nic=2)],
        [_container("c0", gpu=1, nic=1), _container("c1", gpu=1, nic=1)],
        {"example.com/gpu": 2, "example.com/nic": 2},
    ),
    "Init containers request more device plugin resources than user containers": (
        [_container("i0", gpu=2, nic=1), _container("i1", gpu=3, nic=2)],
        [_container("c0", gpu=1, nic=1), _container("c1", gpu=1)],
        {"example.com/gpu": 3, "example.com/nic": 2},
    ),
    "User containers request more device plugin resources than init containers": (
        [_container("i0", gpu=2, nic=1), _container("i1", gpu=2, nic=1)],
        [_container("c0", gpu=3, nic=2), _container("c1", gpu=3, nic=2)],
        {"example.com/gpu": 6, "example.com/nic": 4},
    ),
}


@pytest.mark.parametrize(
    ("inits", "apps", "expected"), DEVICE_REQUESTS.values(), ids=DEVICE_REQUESTS
)
def test_get_pod_device_request(
    inits: list[str], apps: list[str], expected: dict[str, int]
) -> None:
    text = _pod(f"[{', '.join(apps)}]", init=f"[{', '.join(inits)}]" if inits else "")
    [pod] = parse_pods(text, "pod.yaml")
    assert pod.device_request() == expected
