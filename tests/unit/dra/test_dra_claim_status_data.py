"""What a claim's ``status.devices`` entry says of a prepared device (claim_status.py).

The issue's ask, per backend: NVIDIA names the GPU by UUID and PCI bus ID, a MIG device
by its parent's UUID and its profile (the attributes NVIDIA's DRA driver publishes:
k8s-dra-driver-gpu ``cmd/gpu-kubelet-plugin/deviceinfo.go``, ``parentUUID`` and
``profile``); the generic backend names the node's path. The entry's keys are the
list-map keys of resource.k8s.io ``AllocatedDeviceStatus`` (driver, pool, device,
shareID) and a ``Ready`` condition as metav1.Condition requires it (type, status,
reason, lastTransitionTime).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.resources import build_resources
from accel_plugins.dra.kube.claim_status import KubeClaimStatus
from accel_plugins.dra.model import DeviceReport
from accel_plugins.plugin.device import Device
from tests.fixtures.generic import FakeHost
from tests.fixtures.nvidia import simulated_backend
from tests.unit.backends.nvidia.test_nvidia_container_contract import node_of


def writer(driver: str, describe: Any) -> KubeClaimStatus:
    """A writer that never writes: only its entries are looked at."""
    return KubeClaimStatus(
        cast(Any, None), cast(Any, None), driver=driver, node="n1", describe=describe
    )


def nvidia(profile: str, strategy: str, resource: str) -> tuple[Any, Device]:
    backend, _ = simulated_backend(profile, mig_strategy=strategy)
    return backend.dra_device, build_resources(node_of(profile), strategy)[resource][0]


@pytest.mark.parametrize(
    ("profile", "strategy", "resource", "names"),
    [
        pytest.param("pcie-4gpu", "none", "nvidia.com/gpu", ("uuid", "pciBusID"), id="whole-gpu"),
        pytest.param(
            "a100-mig",
            "mixed",
            "nvidia.com/mig-1g.5gb",
            ("uuid", "parentUUID", "profile", "pciBusID"),
            id="mig-device",
        ),
    ],
)
def test_an_nvidia_entry_names_the_gpu(
    profile: str, strategy: str, resource: str, names: tuple[str, ...]
) -> None:
    describe, device = nvidia(profile, strategy, resource)
    facts = gpu_facts(device)
    entry = writer("gpu.nvidia.com", describe)._entry(
        DeviceReport("n1", "gpu-0", "", resource, device)
    )
    data = entry["data"]
    assert set(names) <= set(data)
    assert data["uuid"] == facts.uuid
    assert data["pciBusID"] == facts.pci_bus_id.lower()
    if facts.parent_uuid is not None:
        assert (data["parentUUID"], data["profile"]) == (facts.parent_uuid, facts.mig_profile)
    assert (entry["driver"], entry["pool"], entry["device"]) == ("gpu.nvidia.com", "n1", "gpu-0")
    assert "shareID" not in entry
    (ready,) = entry["conditions"]
    assert {k: ready[k] for k in ("type", "status", "reason")} == {
        "type": "Ready",
        "status": "True",
        "reason": "Prepared",
    }
    assert ready["lastTransitionTime"].endswith("Z")


@pytest.mark.parametrize(
    ("share", "admin", "more"),
    [
        pytest.param("", False, {}, id="plain"),
        pytest.param("4f1c", False, {"shareID": "4f1c"}, id="a-share"),
        pytest.param("", True, {}, id="admin-access"),
    ],
)
def test_a_generic_entry_names_the_node_path(
    fake_host: FakeHost, tmp_path: Path, share: str, admin: bool, more: dict[str, str]
) -> None:
    fake_host.node("/dev/ttyUSB0")
    config = "devices:\n  - name: serial\n    groups:\n      - paths: [{path: /dev/ttyUSB0}]\n"
    backend = GenericBackend(parse_config(config), fake_host.settings())
    ((resource, devices),) = backend.discover().items()
    device = next(iter(devices.values()))
    entry = writer("generic.accel-plugins.io", backend.dra_device)._entry(
        DeviceReport("n1", "serial-0", share, resource, device, admin)
    )
    assert entry["data"]["path"] == "/dev/ttyUSB0"
    assert {k: entry[k] for k in more} == more
    assert entry["data"].get("adminAccess", False) is admin
    assert ("for admin access" in entry["conditions"][0]["message"]) is admin
