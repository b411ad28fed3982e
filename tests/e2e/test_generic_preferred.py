"""The generic backend's preferred allocation, seen through the kubelet emulator's
allocation path (GetPreferredAllocation, then Allocate) on a two-socket fake host."""

from __future__ import annotations

import textwrap

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.kubelet_emulator import Kubelet
from tests.fixtures.framework import StartManager
from tests.fixtures.generic import FakeHost

RESOURCE = "accel-plugins.io/accel"

# One resource, two groups: four accelerators (two per socket) and a pair on socket 1.
CONFIG = """
devices:
  - name: accel
    groups:
      - paths: [{path: "/dev/accel[0-3]"}]
      - paths: [{path: /dev/fpga*}]
"""


def accelerator(host: FakeHost, name: str, minor: int, numa: int) -> None:
    node = host.node(f"/dev/{name}", major=261, minor=minor)
    pci = f"pci0000:00/0000:00:0{minor}.0"
    host.sys_device(pci, {"numa_node": str(numa)})
    host.sys_device(f"{pci}/accel/{name}", {"dev": f"261:{minor}"}, dev=node)


async def paths(kubelet: Kubelet, pod: str, count: int) -> set[str]:
    record = await kubelet.allocate(pod, "main", RESOURCE, count)
    return {spec.host_path for spec in record.response.devices}


async def test_pods_get_one_numa_node_and_whole_groups(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost
) -> None:
    layout = {"accel0": 0, "accel1": 0, "accel2": 1, "accel3": 1, "fpga0": 1, "fpga1": 1}
    for minor, (name, numa) in enumerate(layout.items()):
        accelerator(fake_host, name, minor, numa)
    config = parse_config(textwrap.dedent(CONFIG), "preferred.yaml")
    await start_manager(lambda: GenericBackend(config, fake_host.settings()))
    await kubelet.wait_for_resource(RESOURCE, allocatable=6)
    assert kubelet.resources[RESOURCE].options.get_preferred_allocation_available

    # Two devices: both on socket 0, the first group (accelerators) left with two on socket 1.
    assert await paths(kubelet, "one", 2) == {"/dev/accel0", "/dev/accel1"}
    # One device on socket 1: taken from the accelerator group that is already split,
    # so the FPGA pair stays whole.
    assert await paths(kubelet, "two", 1) == {"/dev/accel2"}
    assert await paths(kubelet, "three", 2) == {"/dev/fpga0", "/dev/fpga1"}
