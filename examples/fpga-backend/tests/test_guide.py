"""The examples of docs/writing-a-backend.md, run: each region between ``# guide: NAME``
and ``# end`` is shown in the guide verbatim (tests/unit/test_writing_a_backend.py)."""

from __future__ import annotations

# guide: imports
import dataclasses
from collections.abc import Collection, Iterable, Sequence

import pytest
from accel_plugins.kubelet import Kubelet
from accel_plugins.plugin import (
    ContainerAllocation,
    Device,
    Holders,
    PodRef,
    prefer_fewest_numa_nodes,
)
from accel_plugins.plugin.allocation import merge
from accel_plugins.testing import FakeHost, ServeBackend
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from accel_fpga.backend import RESOURCE, FpgaBackend, read

# end


def add_card(host: FakeHost, index: int, *, numa: int = 0) -> None:
    pci = host.pci_device(f"0000:{0x3B + index:02x}:00.0", numa_node=numa)
    dev = host.node(f"/dev/fpga{index}", major=240, minor=index)
    host.class_device("fpga", f"fpga{index}", parent=pci, dev=dev, attributes={"errors": "0"})


def unplug(host: FakeHost, index: int) -> None:
    host.remove(f"/dev/fpga{index}")
    host.remove(f"/sys/class/fpga/fpga{index}")


# guide: metrics
class ThermalFpgaBackend(FpgaBackend):
    """The FPGA backend plus each card's temperature (sysfs ``temp``, millidegrees)."""

    def collect_metrics(self, holders: Holders) -> Iterable[Metric]:
        temperature = GaugeMetricFamily(
            "accel_fpga_temperature_celsius",
            "FPGA die temperature.",
            labels=["card", "namespace", "pod", "container"],
        )
        for node in sorted(self.dev_root.glob("fpga[0-9]*")):
            millidegrees = read(self.sys_root / "class" / "fpga" / node.name / "temp")
            if not millidegrees.isdigit():
                continue  # no sensor, or the card is gone: leave its series out
            for pod in holders(RESOURCE, node.name) or [PodRef("", "", "")]:
                labels = [node.name, pod.namespace, pod.pod, pod.container]
                temperature.add_metric(labels, int(millidegrees) / 1000)
        return [temperature]


# end


# guide: test-metrics
async def test_the_temperature_series_reads_the_sensor(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    add_card(accel_host, 0)
    accel_host.write("/sys/class/fpga/fpga0/temp", "41500")
    served = await accel_serve(ThermalFpgaBackend(accel_host.dev, accel_host.sys, 0.02))
    await served.wait_for_devices(RESOURCE, 1, healthy=1)

    scrape = await served.scrape()  # GET /metrics over HTTP, as Prometheus does
    assert scrape.value("accel_fpga_temperature_celsius", card="fpga0") == 41.5
    assert scrape.value("accel_plugins_device_healthy", device="fpga0") == 1.0


# end


# guide: test-removed
async def test_an_unplugged_card_leaves_the_kubelets_list(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    add_card(accel_host, 0)
    add_card(accel_host, 1)
    served = await accel_serve(FpgaBackend(accel_host.dev, accel_host.sys, 0.02))
    await served.wait_for_devices(RESOURCE, 2, healthy=2)

    unplug(accel_host, 1)
    view = await served.wait_for_removed(RESOURCE, "fpga1")
    assert list(view.devices) == ["fpga0"]


# end


# guide: preferred
def board(device: Device) -> int:
    """Two cards per board: fpga0 and fpga1 on board 0, fpga2 and fpga3 on board 1."""
    return int(device.id.removeprefix("fpga")) // 2


class BoardFpgaBackend(FpgaBackend):
    def preferred_allocation(
        self, resource: str, available: Sequence[Device], must_include: Sequence[Device], size: int
    ) -> Sequence[str]:
        # The default policy, grouped by board; it returns device IDs, not Devices.
        return prefer_fewest_numa_nodes(available, must_include, size, group_of=board)

    def has_preference(self, resource: str, devices: Collection[Device]) -> bool:
        # Asked at each new snapshot while it answers False. Once True, the resource
        # advertises GetPreferredAllocation for as long as it is served.
        return len({board(device) for device in devices}) > 1


# end


def advertises_preference(k: Kubelet) -> bool:
    view = k.resources.get(RESOURCE)
    return view is not None and view.connected and view.options.get_preferred_allocation_available


# guide: test-preferred
async def test_a_pod_gets_the_cards_of_one_board(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    for index in range(4):
        add_card(accel_host, index)
    served = await accel_serve(BoardFpgaBackend(accel_host.dev, accel_host.sys, 0.02))
    await served.wait_for_devices(RESOURCE, 4, healthy=4)

    first = await served.allocate(RESOURCE, 1)
    second = await served.allocate(RESOURCE, 2)
    assert first.device_ids == ("fpga0",)
    assert second.device_ids == ("fpga2", "fpga3")  # a whole board, not fpga1 and fpga2


# end


async def test_a_preference_once_advertised_stays(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    add_card(accel_host, 0)
    served = await accel_serve(BoardFpgaBackend(accel_host.dev, accel_host.sys, 0.02))
    view = await served.wait_for_devices(RESOURCE, 1)
    assert not view.options.get_preferred_allocation_available  # one board: nothing to prefer

    add_card(accel_host, 2)  # a second board
    await served.kubelet.wait_for(advertises_preference, 5, what="preference advertised")

    unplug(accel_host, 2)
    view = await served.wait_for_removed(RESOURCE, "fpga2")
    assert view.options.get_preferred_allocation_available


# guide: allocate
class SharedEnvFpgaBackend(FpgaBackend):
    """The container learns all its cards from one variable, ACME_VISIBLE_FPGAS=fpga0,fpga1."""

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation:
        merged = merge(devices)  # the default answer: nodes, mounts, env, CDI names
        cards = ",".join(device.id for device in devices)
        return dataclasses.replace(merged, envs={**merged.envs, "ACME_VISIBLE_FPGAS": cards})


# end


async def test_an_allocate_hook_lists_every_card_in_one_variable(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    add_card(accel_host, 0)
    add_card(accel_host, 1)
    served = await accel_serve(SharedEnvFpgaBackend(accel_host.dev, accel_host.sys, 0.02))
    await served.wait_for_devices(RESOURCE, 2, healthy=2)

    record = await served.allocate(RESOURCE, 2)
    assert record.response.envs == {"ACME_VISIBLE_FPGAS": "fpga0,fpga1"}


@pytest.mark.parametrize("index", [0, 1])
def test_board_pairs_cards(index: int) -> None:
    assert board(Device(f"fpga{index}")) == 0
    assert board(Device(f"fpga{index + 2}")) == 1
