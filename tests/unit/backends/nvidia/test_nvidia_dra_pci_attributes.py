"""NVIDIA devices carry Kubernetes' standard PCI and NUMA attributes, where they are known.

The names and value forms are Kubernetes' own, from kubernetes/kubernetes
``staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/``: ``attribute.go``
defines ``resource.kubernetes.io/pcieRoot`` as the root complex in the form
``pci<domain>:<bus>`` (``pci0000:00``) and ``resource.kubernetes.io/pciBusID`` as the
extended BDF; ``pci_linux.go`` (``resolvePCIeRoot``) takes the root as the first
component under ``/sys/devices`` of the ``/sys/bus/pci/devices/<bdf>`` link's target and
accepts only lower-case ``^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-9a-f]$``;
``numa_linux.go`` publishes ``resource.kubernetes.io/numaNode`` as an int and leaves it
out for a device without NUMA affinity (-1). A GPU that sysfs does not show has no
root (upstream's helper errs, and drivers leave the attribute out).

GPUs come from the simulated NVML (a data table) or, for NVML's own bus-ID form, from
the fake libnvidia-ml.so.1 (tests/nvml_fake) through the real pynvml adapter; sysfs is a
fake tree laid out as the kernel's (tests/support/pci_topology.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.dra.kube.slices import STANDARD_NUMA_ATTRIBUTE, pool_devices
from accel_plugins.plugin.dra_attributes import PCI_BUS_ID, PCIE_ROOT
from accel_plugins.testing import FakeHost
from tests.fixtures.nvidia import FakeNvml, RunNvidia, settings, simulated_backend
from tests.support.pci_topology import Function, add_function

NUMA_NODE = STANDARD_NUMA_ATTRIBUTE
STANDARD = (PCI_BUS_ID, PCIE_ROOT, NUMA_NODE)
# attribute.go: "pci<domain>:<bus>"; pci_linux.go verifyPCIBDFFormat: the extended BDF.
ROOT_FORM = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
BDF_FORM = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
L40S = {"name": "NVIDIA L40S", "memoryMiB": 46068}
A100 = {"name": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960}


@dataclass(frozen=True)
class Case:
    """The simulated GPUs, the PCI functions sysfs shows, and the standard attributes
    expected per device (``gpu <index>``, ``mig on <parent index>``)."""

    gpus: tuple[dict[str, Any], ...]
    sysfs: tuple[Function, ...]
    expected: dict[str, dict[str, object]]
    options: dict[str, Any] = field(default_factory=dict)


CASES = {
    "gpu-behind-a-root-port": Case(
        ({**L40S, "pciBusId": "0000:21:00.0", "numaNode": 0},),
        (Function("pci0000:00/0000:00:01.1/0000:21:00.0", 0),),
        {"gpu 0": {PCI_BUS_ID: "0000:21:00.0", PCIE_ROOT: "pci0000:00", NUMA_NODE: 0}},
    ),
    "two-gpus-under-two-roots": Case(
        (
            {**L40S, "pciBusId": "0000:21:00.0", "numaNode": 0},
            {**L40S, "pciBusId": "0000:a1:00.0", "numaNode": 1},
        ),
        (
            Function("pci0000:00/0000:00:01.1/0000:21:00.0", 0),
            Function("pci0000:80/0000:80:01.1/0000:a1:00.0", 1),
        ),
        {
            "gpu 0": {PCI_BUS_ID: "0000:21:00.0", PCIE_ROOT: "pci0000:00", NUMA_NODE: 0},
            "gpu 1": {PCI_BUS_ID: "0000:a1:00.0", PCIE_ROOT: "pci0000:80", NUMA_NODE: 1},
        },
    ),
    "behind-a-pcie-switch-in-domain-1": Case(
        ({**L40S, "pciBusId": "0001:C3:00.0", "numaNode": 1},),
        (Function("pci0001:c0/0001:c0:01.0/0001:c1:00.0/0001:c2:08.0/0001:c3:00.0", 1),),
        {"gpu 0": {PCI_BUS_ID: "0001:c3:00.0", PCIE_ROOT: "pci0001:c0", NUMA_NODE: 1}},
    ),
    "not-in-sysfs-no-root": Case(
        ({**L40S, "pciBusId": "0000:21:00.0", "numaNode": 0},),
        (),
        {"gpu 0": {PCI_BUS_ID: "0000:21:00.0", NUMA_NODE: 0}},
    ),
    "no-numa-affinity": Case(
        ({**L40S, "pciBusId": "0000:21:00.0"},),
        (Function("pci0000:00/0000:00:01.1/0000:21:00.0", -1),),
        {"gpu 0": {PCI_BUS_ID: "0000:21:00.0", PCIE_ROOT: "pci0000:00"}},
    ),
    "mig-device-on-its-gpus-root": Case(
        (
            {**A100, "pciBusId": "0000:07:00.0", "numaNode": 0, "mig": ["3g.20gb"]},
            {**A100, "pciBusId": "0000:87:00.0", "numaNode": 1},
        ),
        (
            Function("pci0000:00/0000:00:02.0/0000:07:00.0", 0),
            Function("pci0000:80/0000:80:02.0/0000:87:00.0", 1),
        ),
        {
            "mig on 0": {PCI_BUS_ID: "0000:07:00.0", PCIE_ROOT: "pci0000:00", NUMA_NODE: 0},
            "gpu 1": {PCI_BUS_ID: "0000:87:00.0", PCIE_ROOT: "pci0000:80", NUMA_NODE: 1},
        },
        {"mig_strategy": "mixed"},
    ),
}


def key(attributes: dict[str, object]) -> str:
    if attributes["type"] == "mig":
        return f"mig on {attributes['parentIndex']}"
    return f"gpu {attributes['index']}"


async def standard_attributes(
    backend: NvidiaBackend, run_nvidia: RunNvidia
) -> dict[str, dict[str, object]]:
    """The standard attributes of each device as the driver's slices carry them."""
    recorder = await run_nvidia(backend)
    found: dict[str, dict[str, object]] = {}
    for device in pool_devices(recorder.latest, describe=backend.dra_device, namer=backend):
        values = {
            name: next(v for v in (a.string, a.int, a.bool, a.version) if v is not None)
            for name, a in (device.attributes or {}).items()
        }
        found[key(values)] = {k: values[k] for k in STANDARD if k in values}
    return found


def check_forms(found: dict[str, dict[str, object]]) -> None:
    for attributes in found.values():
        assert ROOT_FORM.match(str(attributes.get(PCIE_ROOT, "pci0000:00")))
        assert BDF_FORM.match(str(attributes.get(PCI_BUS_ID, "0000:00:00.0")))
        assert isinstance(attributes.get(NUMA_NODE, 0), int)


@pytest.mark.parametrize("case", [pytest.param(c, id=name) for name, c in CASES.items()])
async def test_simulated_gpus_carry_the_standard_attributes(
    case: Case, tmp_path: Path, run_nvidia: RunNvidia
) -> None:
    host = FakeHost(tmp_path / "host")
    for function in case.sysfs:
        add_function(host, function)
    backend, _ = simulated_backend({"gpus": list(case.gpus)}, **case.options)
    backend.sys_root = host.sys
    found = await standard_attributes(backend, run_nvidia)
    assert found == case.expected
    check_forms(found)


async def test_nvmls_own_bus_id_form_through_the_real_adapter(
    fake_nvml: FakeNvml, tmp_path: Path, run_nvidia: RunNvidia
) -> None:
    """NVML answers ``00000000:3B:00.0`` (8-digit domain, upper case) and, here, no NUMA
    node: the attributes are upstream's forms, the node read from sysfs as upstream's
    numa_linux.go reads it (``/sys/bus/pci/devices/<bdf>/numa_node``)."""
    fake_nvml.write(
        "gpu GPU-00000000-1111-2222-3333-444444444444 0 81920 00000000:3B:00.0 na 0 "
        "NVIDIA A100-SXM4-80GB"
    )
    host = FakeHost(tmp_path / "host")
    add_function(host, Function("pci0000:3a/0000:3a:00.0/0000:3b:00.0", 1))
    backend = NvidiaBackend(fake_nvml.adapter(sys_root=host.sys), settings(), wait_ms=20)
    backend.sys_root = host.sys
    found = await standard_attributes(backend, run_nvidia)
    assert found == {"gpu 0": {PCI_BUS_ID: "0000:3b:00.0", PCIE_ROOT: "pci0000:3a", NUMA_NODE: 1}}
    check_forms(found)
