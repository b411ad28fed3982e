"""Generic devices carry Kubernetes' standard PCI and NUMA attributes, where sysfs tells them.

From the device node to its hardware as the kernel lays it out:
``/sys/dev/char/<major>:<minor>`` leads to the class device, its ``device`` link to
the PCI function when the node is that function's own (an RDMA NIC's
``/dev/infiniband/uverbsN``), and the first component under ``/sys/devices`` is the
root complex. Forms as Kubernetes defines them (kubernetes/kubernetes
``staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/``: ``attribute.go``,
``resource.kubernetes.io/pcieRoot`` is ``pci<domain>:<bus>`` and ``pciBusID`` the
extended BDF; ``pci_linux.go``, the root is the first path component under
/sys/devices; ``numa_linux.go``, ``numaNode`` an int, left out for -1). The NUMA node
is the nearest ancestor's ``numa_node`` (usually the PCI function's).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.dra.kube.slices import STANDARD_NUMA_ATTRIBUTE, pool_devices
from accel_plugins.plugin.dra_attributes import PCI_BUS_ID, PCIE_ROOT
from tests.fixtures.generic import FakeHost
from tests.support.pci_topology import Function, add_function, add_rdma_nic

NUMA_NODE = STANDARD_NUMA_ATTRIBUTE
STANDARD = (PCI_BUS_ID, PCIE_ROOT, NUMA_NODE)
ROOT_FORM = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")  # attribute.go: pci<domain>:<bus>
BDF_FORM = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")  # verifyPCIBDFFormat


def nic(devpath: str, numa: int) -> Callable[[FakeHost], str]:
    return lambda host: add_rdma_nic(host, 0, Function(devpath, numa))


def usb_serial(host: FakeHost) -> str:
    """A USB serial adapter behind the root's USB controller: no bus ID of its own."""
    add_function(host, Function("pci0000:00/0000:00:14.0", 0))
    interface = "pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0"
    host.sys_device(interface)
    host.node("/dev/ttyUSB0", major=188, minor=0)
    host.class_device("tty", "ttyUSB0", parent=interface, dev=(188, 0))
    return "/dev/ttyUSB0"


def virtual(host: FakeHost) -> str:
    host.node("/dev/unit0", major=261, minor=0)
    host.class_device("misc", "unit0", dev=(261, 0))
    return "/dev/unit0"


def unknown_to_sysfs(host: FakeHost) -> str:
    host.node("/dev/unit0", major=261, minor=0)
    return "/dev/unit0"


@dataclass(frozen=True)
class Case:
    layout: Callable[[FakeHost], str]  # builds the host, returns the device node's path
    expected: dict[str, object]


CASES = {
    "rdma-nic-on-its-own-pci-function": Case(
        nic("pci0000:80/0000:80:01.2/0000:a2:00.0", 1),
        {PCI_BUS_ID: "0000:a2:00.0", PCIE_ROOT: "pci0000:80", NUMA_NODE: 1},
    ),
    "rdma-nic-behind-a-switch-in-domain-1": Case(
        nic("pci0001:00/0001:00:02.0/0001:01:00.0/0001:02:00.0", 0),
        {PCI_BUS_ID: "0001:02:00.0", PCIE_ROOT: "pci0001:00", NUMA_NODE: 0},
    ),
    "rdma-nic-without-numa-affinity": Case(
        nic("pci0000:40/0000:40:01.1/0000:42:00.0", -1),
        {PCI_BUS_ID: "0000:42:00.0", PCIE_ROOT: "pci0000:40"},
    ),
    "usb-serial-behind-pci": Case(usb_serial, {PCIE_ROOT: "pci0000:00", NUMA_NODE: 0}),
    "virtual-device": Case(virtual, {}),
    "node-unknown-to-sysfs": Case(unknown_to_sysfs, {}),
}


@pytest.mark.parametrize("case", [pytest.param(c, id=name) for name, c in CASES.items()])
def test_generic_devices_carry_the_standard_attributes(case: Case, tmp_path: Path) -> None:
    host = FakeHost(tmp_path / "host")
    path = case.layout(host)
    config = parse_config(f"devices:\n- name: unit\n  groups:\n  - paths:\n    - path: {path}\n")
    backend = GenericBackend(config, host.settings())
    (device,) = pool_devices(backend.scan(), describe=backend.dra_device)
    values = {
        name: next(v for v in (a.string, a.int, a.bool, a.version) if v is not None)
        for name, a in (device.attributes or {}).items()
    }
    assert values["path"] == path
    found = {k: values[k] for k in STANDARD if k in values}
    assert found == case.expected
    assert ROOT_FORM.match(str(found.get(PCIE_ROOT, "pci0000:00")))
    assert BDF_FORM.match(str(found.get(PCI_BUS_ID, "0000:00:00.0")))
