"""Device-plugin CDI strategies: a spec dir emptied between two Allocates is written again.

A reboot empties /var/run/cdi (a tmpfs) and anyone may remove a file there;
an Allocate answer naming a CDI device whose spec is gone makes the runtime
refuse the container. So before the framework answers, the backend writes
again what is missing (CdiSpecKeeper). The backends are built as their
commands build them, on a simulated NVIDIA node and a fake /dev; the manager,
gRPC and the kubelet emulator are real.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.factory import backend_factory
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.errors import PluginCallError
from accel_plugins.plugin.backend import Backend
from tests.e2e.test_generic_plugin import SERIAL
from tests.e2e.test_generic_plugin import factory as generic_factory
from tests.e2e.test_nvidia_cdi import devices_on_disk
from tests.e2e.test_nvidia_cdi import options as nvidia_options
from tests.fixtures.framework import StartManager
from tests.fixtures.generic import FakeHost

Case = Callable[[Path, FakeHost], tuple[Callable[[], Backend], str]]


def nvidia(strategy: str) -> Case:
    def build(tmp_path: Path, host: FakeHost) -> tuple[Callable[[], Backend], str]:
        opts = nvidia_options(tmp_path, device_list_strategy=(strategy,))
        return backend_factory(opts, {}), "nvidia.com/gpu"

    return build


def generic(tmp_path: Path, host: FakeHost) -> tuple[Callable[[], Backend], str]:
    host.node("/dev/ttyUSB0")
    host.node("/dev/ttyUSB1")
    return generic_factory(host, tmp_path, cdi_spec_dir=tmp_path / "cdi"), SERIAL


def named(record: Any) -> set[str]:
    """The CDI names of an answer: its CDI devices field and NVIDIA's annotation."""
    found = set(record.response.cdi_devices)
    for key, value in record.response.annotations.items():
        if key.startswith("cdi.k8s.io/"):
            found |= set(value.split(","))
    assert found, "the answer names no CDI device"
    return found


def empty(spec_dir: Path) -> None:
    shutil.rmtree(spec_dir)


def garble(spec_dir: Path) -> None:
    for path in spec_dir.iterdir():
        path.write_text("")


CASES = [
    pytest.param(nvidia("cdi-cri"), id="nvidia-cdi-cri"),
    pytest.param(nvidia("cdi-annotations"), id="nvidia-cdi-annotations"),
    pytest.param(generic, id="generic-cdi"),
]


@pytest.mark.parametrize("damage", [empty, garble], ids=["dir-emptied", "files-changed"])
@pytest.mark.parametrize("case", CASES)
async def test_the_spec_is_on_disk_again_before_the_second_allocate_answers(
    tmp_path: Path,
    kubelet: Kubelet,
    start_manager: StartManager,
    fake_host: FakeHost,
    case: Case,
    damage: Callable[[Path], None],
) -> None:
    factory, resource = case(tmp_path, fake_host)
    spec_dir = tmp_path / "cdi"
    await start_manager(factory)
    await kubelet.wait_for_resource(resource)
    first = await kubelet.allocate("pod", "one", resource, 1)
    assert named(first) <= devices_on_disk(spec_dir)
    written = {p.name: p.read_text() for p in spec_dir.iterdir()}

    damage(spec_dir)
    second = await kubelet.allocate("pod", "two", resource, 1)
    assert named(second) <= devices_on_disk(spec_dir)
    assert {p.name: p.read_text() for p in spec_dir.iterdir()} == written


async def test_a_spec_that_cannot_be_written_again_fails_the_allocate(
    tmp_path: Path, kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost
) -> None:
    factory, resource = generic(tmp_path, fake_host)
    spec_dir = tmp_path / "cdi"
    await start_manager(factory)
    await kubelet.wait_for_resource(resource, allocatable=2)
    await kubelet.allocate("pod", "one", resource, 1)
    shutil.rmtree(spec_dir)
    spec_dir.write_text("")  # a file where the directory belongs: nothing can be written
    with pytest.raises(PluginCallError, match=r"INTERNAL: .* cannot write the CDI specs in "):
        await kubelet.allocate("pod", "two", resource, 1)
    assert [r.container for r in kubelet.allocations] == ["one"]  # no answer, no allocation
