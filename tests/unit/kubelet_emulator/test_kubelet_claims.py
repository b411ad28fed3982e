"""Resource claims in the emulator: the pod manifest's claims, which CDI devices a container
gets (the kubelet's ``cdiDevicesAsList``), CDI spec lookup, and the command's exit-2 errors.

The admission itself runs against a real API server and a real DRA driver in
tests/e2e/test_kubelet_admit_claims.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import MappingProxyType

import pytest

from accel_plugins.errors import ConfigError
from accel_plugins.kubelet_emulator.cdi import find_device
from accel_plugins.kubelet_emulator.claims import ClaimInfo, PreparedClaim
from accel_plugins.kubelet_emulator.dra import DraClaimResult, DraDevice
from accel_plugins.kubelet_emulator.podspec import ContainerClaim, PodClaim, parse_pods

POD = """
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  resourceClaims:
    - {name: gpus, resourceClaimName: two-gpus}
    - {name: nic, resourceClaimName: a-nic}
  containers:
    - name: main
      resources:
        claims: [{name: gpus}, {name: nic, request: vf}]
    - name: plain
"""


def test_claims_of_the_pod_and_its_containers() -> None:
    (pod,) = parse_pods(POD, "pod.yaml")
    assert pod.resource_claims == (PodClaim("gpus", "two-gpus"), PodClaim("nic", "a-nic"))
    main, plain = pod.containers
    assert main.claims == (ContainerClaim("gpus"), ContainerClaim("nic", "vf"))
    assert plain.claims == ()


TEMPLATED = """
apiVersion: v1
kind: Pod
metadata: {name: trainer, uid: 0b6f-pod}
spec:
  resourceClaims:
    - {name: gpus, resourceClaimTemplateName: two-gpus}
    - {name: spare, resourceClaimTemplateName: maybe}
    - {name: nic, resourceClaimTemplateName: a-nic}
  containers:
    - name: main
      resources:
        claims: [{name: gpus}, {name: spare}, {name: nic}]
status:
  resourceClaimStatuses:
    - {name: gpus, resourceClaimName: trainer-gpus-x7k2q}
    - {name: spare}
"""


def test_claims_from_templates_are_found_in_the_pods_status() -> None:
    """k8s.io/dynamic-resource-allocation resourceclaim.Name: the status entry names the
    generated claim; an entry without a name means none was needed; no entry means none
    was made yet."""
    (pod,) = parse_pods(TEMPLATED, "pod.yaml")
    assert pod.uid == "0b6f-pod"
    assert pod.resource_claims == (
        PodClaim("gpus", "trainer-gpus-x7k2q", "two-gpus", generated=True),
        PodClaim("spare", None, "maybe", generated=True),
        PodClaim("nic", None, "a-nic", generated=False),
    )


@pytest.mark.parametrize(
    ("old", "new", "field", "reason"),
    [
        pytest.param(
            "resourceClaimName: two-gpus",
            "resourceClaimName: two-gpus, resourceClaimTemplateName: t",
            "spec.resourceClaims[0]",
            "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
            id="both-forms",
        ),
        pytest.param(
            "resourceClaimName: two-gpus",
            "resourceClaimTemplateName: Bad_Template",
            "spec.resourceClaims[0].resourceClaimTemplateName",
            "not a DNS-1123 subdomain",
            id="template-not-a-subdomain",
        ),
        pytest.param(
            "{name: nic, request: vf}",
            "{name: disk}",
            "spec.containers[0].resources.claims[1].name",
            "Not found: 'disk'",
            id="container-names-an-unknown-claim",
        ),
        pytest.param(
            "{name: nic, resourceClaimName: a-nic}",
            "{name: gpus, resourceClaimName: a-nic}",
            "spec.resourceClaims[1].name",
            "duplicate pod claim name",
            id="duplicate-pod-claim",
        ),
        pytest.param(
            "resourceClaimName: two-gpus",
            "resourceClaimName: Two_GPUs",
            "spec.resourceClaims[0].resourceClaimName",
            "not a DNS-1123 subdomain",
            id="claim-name-not-a-subdomain",
        ),
        pytest.param(
            "request: vf", "request: 3", "claims[1].request", "expected a string", id="bad-request"
        ),
    ],
)
def test_malformed_claims_name_the_field(old: str, new: str, field: str, reason: str) -> None:
    assert old in POD
    with pytest.raises(ConfigError) as caught:
        parse_pods(POD.replace(old, new), "pod.yaml")
    assert field in str(caught.value)
    assert reason in str(caught.value)


def prepared(*devices: DraDevice) -> PreparedClaim:
    info = ClaimInfo(namespace="default", name="c", uid="u", allocated=True)
    result = DraClaimResult(devices=devices)
    return PreparedClaim("c", info, MappingProxyType({"d.example.com": result}))


GPU0 = DraDevice(("gpu",), "node", "gpu-0", ("k8s.d/claim=u-gpu",))
NIC = DraDevice(("nic",), "node", "nic-0", ("k8s.d/claim=u-nic",))
ANY = DraDevice((), "node", "shared-0", ("vendor.com/x=shared",))


@pytest.mark.parametrize(
    ("request_name", "expected"),
    [
        pytest.param(
            "", ["k8s.d/claim=u-gpu", "k8s.d/claim=u-nic", "vendor.com/x=shared"], id="all"
        ),
        pytest.param("nic", ["k8s.d/claim=u-nic", "vendor.com/x=shared"], id="one-request"),
        pytest.param("other", ["vendor.com/x=shared"], id="no-request-names-go-everywhere"),
    ],
)
def test_cdi_devices_of_a_request(request_name: str, expected: list[str]) -> None:
    """claiminfo.go cdiDevicesAsList: a device without request names serves every request."""
    assert prepared(GPU0, NIC, ANY).cdi_ids(request_name) == expected


def write_spec(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


SPEC = {
    "cdiVersion": "0.6.0",
    "kind": "k8s.d.example.com/claim",
    "containerEdits": {"env": ["SPEC_WIDE=1"]},
    "devices": [
        {
            "name": "u-gpu",
            "containerEdits": {
                "deviceNodes": [{"path": "/dev/gpu0", "permissions": "rw"}],
                "env": ["GPU=0"],
                "mounts": [
                    {"hostPath": "/lib/a.so", "containerPath": "/lib/a.so", "options": ["ro"]}
                ],
            },
        }
    ],
}


def test_a_cdi_device_from_its_spec(tmp_path: Path) -> None:
    path = write_spec(tmp_path / "etc", "claim.json", json.dumps(SPEC))
    write_spec(tmp_path / "etc", "broken.json", "{not json")
    edits = find_device("k8s.d.example.com/claim=u-gpu", [tmp_path / "etc", tmp_path / "absent"])
    assert edits is not None
    assert edits.source == path
    assert edits.device_nodes == ("/dev/gpu0 -> /dev/gpu0 (rw)",)
    assert edits.env == ("SPEC_WIDE=1", "GPU=0")  # spec-wide edits apply to every device
    assert edits.mounts == ("/lib/a.so -> /lib/a.so (ro)",)


@pytest.mark.parametrize(
    "qualified",
    [
        pytest.param("k8s.d.example.com/claim=nope", id="unknown-device"),
        pytest.param("other.example.com/claim=u-gpu", id="other-kind"),
        pytest.param("not-qualified", id="not-a-qualified-name"),
    ],
)
def test_no_spec_has_it(tmp_path: Path, qualified: str) -> None:
    write_spec(tmp_path, "claim.json", json.dumps(SPEC))
    assert find_device(qualified, [tmp_path]) is None


def test_a_later_directory_wins_as_in_the_cdi_cache(tmp_path: Path) -> None:
    write_spec(tmp_path / "etc", "a.json", json.dumps(SPEC))
    later = textwrap.dedent(
        """\
        cdiVersion: 0.6.0
        kind: k8s.d.example.com/claim
        devices:
          - name: u-gpu
            containerEdits: {deviceNodes: [{path: /dev/gpu9}]}
        """
    )
    path = write_spec(tmp_path / "run", "a.yaml", later)
    edits = find_device("k8s.d.example.com/claim=u-gpu", [tmp_path / "etc", tmp_path / "run"])
    assert edits is not None
    assert (edits.source, edits.device_nodes) == (path, ("/dev/gpu9 -> /dev/gpu9 (rwm)",))


CLAIMED_POD = """
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  resourceClaims: [{name: c, resourceClaimName: my-claim}]
  containers: [{name: main, resources: {claims: [{name: c}]}}]
"""


@pytest.mark.parametrize(
    ("pod", "flags", "message"),
    [
        pytest.param(
            CLAIMED_POD,
            [],
            "pod default/p has resource claims: the emulator reads them from an API server; "
            "give --kubeconfig or set KUBECONFIG",
            id="no-kubeconfig",
        ),
        pytest.param(
            CLAIMED_POD,
            ["--kubeconfig", "/nonexistent/kubeconfig"],
            "--kubeconfig",
            id="unreadable",
        ),
    ],
)
def test_command_refuses_before_starting(
    tmp_path: Path, pod: str, flags: list[str], message: str
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(pod)
    env = {k: v for k, v in os.environ.items() if "KUBECONFIG" not in k}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "accel_plugins.cli.main",
            "kubelet",
            "--plugin-dir",
            str(tmp_path / "dp"),
            "--admit",
            str(manifest),
            "--once",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "dp").exists()  # refused before the emulator started
