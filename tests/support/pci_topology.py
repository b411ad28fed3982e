"""A node's PCIe tree in a fake sysfs: PCI functions under their root complex, RDMA NICs.

Laid out as the kernel does it, which is what both our backends and Kubernetes' own
helpers read (k8s.io/dynamic-resource-allocation/deviceattribute, pci_linux.go
``resolvePCIeRoot``): ``/sys/bus/pci/devices/<bdf>`` links to
``/sys/devices/pci<domain>:<bus>/<bridges...>/<bdf>``, whose first component is the
root complex (the ``resource.kubernetes.io/pcieRoot`` value), and each function has a
``numa_node`` file (-1: no NUMA affinity). An RDMA NIC's verbs node
``/dev/infiniband/uverbs<n>`` (char 231:192+n, as ib_uverbs numbers them) is the class
device ``infiniband_verbs/uverbs<n>`` of its PCI function.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from accel_plugins.testing import FakeHost

# Linux drivers/infiniband/core/uverbs_main.c: IB_UVERBS_MAJOR, IB_UVERBS_BASE_MINOR.
UVERBS_MAJOR = 231
UVERBS_BASE_MINOR = 192


@dataclass(frozen=True)
class Function:
    """A PCI function at ``devpath`` under /sys/devices
    (``pci0000:80/0000:80:01.1/0000:a1:00.0``), on NUMA node ``numa_node``."""

    devpath: str
    numa_node: int | None = None

    @property
    def address(self) -> str:
        return self.devpath.rsplit("/", 1)[-1]

    @property
    def root(self) -> str:
        return self.devpath.split("/", 1)[0]


def add_function(host: FakeHost, function: Function) -> str:
    """The function's directory and its /sys/bus/pci/devices link; returns its devpath."""
    directory = host.sys_device(function.devpath, numa_node=function.numa_node)
    link = host.sys / "bus" / "pci" / "devices" / function.address
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(directory, link.parent))  # relative, as sysfs has it
    return function.devpath


def uverbs_path(index: int) -> str:
    return f"/dev/infiniband/uverbs{index}"


def add_rdma_nic(host: FakeHost, index: int, function: Function) -> str:
    """``/dev/infiniband/uverbs<index>`` on ``function``; returns the node's host path.
    The node is a real device node (mknod: the calling test skips without CAP_MKNOD)."""
    dev = (UVERBS_MAJOR, UVERBS_BASE_MINOR + index)
    host.node(uverbs_path(index), major=dev[0], minor=dev[1])
    host.class_device(
        "infiniband_verbs", f"uverbs{index}", parent=add_function(host, function), dev=dev
    )
    return uverbs_path(index)
