"""The generic backend behind the real framework, against the kubelet emulator.

Device nodes are made with mknod under a fake host /dev; everything between
them and the kubelet (manager, gRPC servers, registration, ListAndWatch,
Allocate) is the real thing over unix sockets.
"""

from __future__ import annotations

import textwrap
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.discovery import device_id
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.model import DeviceSpec, MountSpec
from accel_plugins.runtime.podresources import PodResourcesCache
from tests.fixtures.framework import StartManager
from tests.fixtures.generic import FakeHost
from tests.support.cdi import assert_valid_spec_file

SERIAL = "accel-plugins.io/serial"
KVM = "accel-plugins.io/kvm"

CONFIG = """
devices:
  - name: serial
    groups:
      - paths:
          - {path: /dev/ttyUSB*, mountPath: /dev/serial/, permissions: rw}
  - name: kvm
    groups:
      - count: 3
        paths:
          - {path: /dev/kvm}
          - {path: MODELS, mountPath: /models, type: Mount, readOnly: true}
"""

TTY0 = device_id(0, ["/dev/ttyUSB0"])
TTY1 = device_id(0, ["/dev/ttyUSB1"])


def factory(host: FakeHost, tmp_path: Path, **kwargs: Any) -> Any:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    config = parse_config(textwrap.dedent(CONFIG).replace("MODELS", str(models)), "e2e.yaml")
    in_use = kwargs.pop("in_use", None)
    refresh = kwargs.pop("refresh_in_use", None)
    settings = host.settings(**kwargs)
    return lambda: GenericBackend(config, settings, in_use=in_use, refresh_in_use=refresh)


async def test_devices_register_and_allocate(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost, tmp_path: Path
) -> None:
    fake_host.node("/dev/ttyUSB0")
    fake_host.node("/dev/ttyUSB1")
    fake_host.node("/dev/kvm", major=10, minor=232)
    await start_manager(factory(fake_host, tmp_path))
    serial = await kubelet.wait_for_resource(SERIAL, allocatable=2)
    assert serial.healthy == sorted([TTY0, TTY1])
    kvm = await kubelet.wait_for_resource(KVM, allocatable=3)
    kvm_ids = kvm.healthy

    record = await kubelet.allocate("pod", "main", SERIAL, 1)
    (tty,) = record.device_ids
    host_path = "/dev/ttyUSB0" if tty == TTY0 else "/dev/ttyUSB1"
    assert record.response.devices == (
        DeviceSpec(f"/dev/serial/{host_path.rsplit('/', 1)[1]}", host_path, "rw"),
    )
    assert record.response.mounts == ()
    assert record.response.cdi_devices == ()

    shared = await kubelet.allocate("pod", "main", KVM, 2)
    assert set(shared.device_ids) <= set(kvm_ids)
    # Two replicas of the same node: the container gets it (and the mount) once.
    assert shared.response.devices == (DeviceSpec("/dev/kvm", "/dev/kvm", "mrw"),)
    assert shared.response.mounts == (MountSpec("/models", str(tmp_path / "models"), True),)


async def test_hotplug_health_flip_and_recovery(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost, tmp_path: Path
) -> None:
    fake_host.node("/dev/ttyUSB0")
    await start_manager(factory(fake_host, tmp_path))
    await kubelet.wait_for_resource(SERIAL, allocatable=1)

    fake_host.node("/dev/ttyUSB1")  # plugged in
    view = await kubelet.wait_for_resource(SERIAL, allocatable=2)
    assert view.healthy == sorted([TTY0, TTY1])

    fake_host.remove("/dev/ttyUSB1")  # unplugged
    await kubelet.wait_for(lambda k: k.resources[SERIAL].unhealthy == [TTY1])

    fake_host.regular_file("/dev/ttyUSB1")  # something else took its name
    fake_host.remove("/dev/ttyUSB0")
    fake_host.regular_file("/dev/ttyUSB0")
    await kubelet.wait_for(lambda k: k.resources[SERIAL].unhealthy == sorted([TTY0, TTY1]))

    fake_host.remove("/dev/ttyUSB0")
    fake_host.node("/dev/ttyUSB0")  # back, same name, same ID
    await kubelet.wait_for(lambda k: k.resources[SERIAL].healthy == [TTY0])


async def test_an_unplugged_device_stays_listed_until_its_pod_lets_go(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost, tmp_path: Path
) -> None:
    def in_use(resource: str) -> Collection[str]:
        return {i for r in kubelet.allocations if r.resource == resource for i in r.device_ids}

    fake_host.node("/dev/ttyUSB0")
    fake_host.node("/dev/ttyUSB1")
    backends: list[GenericBackend] = []
    make = factory(fake_host, tmp_path, in_use=in_use)

    def build() -> GenericBackend:
        backends.append(make())
        return backends[-1]

    await start_manager(build)
    await kubelet.wait_for_resource(SERIAL, allocatable=2)
    record = await kubelet.allocate("pod", "main", SERIAL, 1)
    (held,) = record.device_ids
    free = TTY1 if held == TTY0 else TTY0

    fake_host.remove("/dev/ttyUSB0")
    fake_host.remove("/dev/ttyUSB1")
    await kubelet.wait_for(lambda k: list(k.resources[SERIAL].devices) == [held])
    assert kubelet.resources[SERIAL].unhealthy == [held]
    assert free not in kubelet.resources[SERIAL].devices

    kubelet.release("pod")
    backends[-1].rescan()
    await kubelet.wait_for(lambda k: k.resources[SERIAL].capacity == 0)


async def test_restarts_keep_the_device_ids(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost, tmp_path: Path
) -> None:
    fake_host.node("/dev/ttyUSB0")
    fake_host.node("/dev/kvm", major=10, minor=232)
    running = await start_manager(factory(fake_host, tmp_path))
    await kubelet.wait_for_resource(SERIAL, allocatable=1)
    # Both resources' first lists: each resource registers on its own, KVM may come later.
    await kubelet.wait_for_resource(KVM, allocatable=3)
    before = {r: sorted(kubelet.resources[r].devices) for r in (SERIAL, KVM)}
    record = await kubelet.allocate("pod", "main", SERIAL, 1)

    await kubelet.restart()  # the kubelet restarts: the plugin registers again
    await kubelet.wait_for(lambda k: len(k.registrations) >= 4)
    await kubelet.wait_for_resource(SERIAL, allocatable=1)
    assert sorted(kubelet.resources[SERIAL].devices) == before[SERIAL]

    await running.manager.stop()  # the plugin restarts (a new process would do the same)
    await start_manager(factory(fake_host, tmp_path))
    await kubelet.wait_for(lambda k: len(k.registrations) >= 6)
    await kubelet.wait_for_resource(KVM, allocatable=3)
    assert {r: sorted(kubelet.resources[r].devices) for r in (SERIAL, KVM)} == before
    assert [r.device_ids for r in kubelet.allocations] == [record.device_ids]


async def test_cdi_spec_and_response_agree(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost, tmp_path: Path
) -> None:
    cdi_dir = tmp_path / "cdi"
    fake_host.node("/dev/ttyUSB0")
    running = await start_manager(factory(fake_host, tmp_path, cdi_spec_dir=cdi_dir))
    await kubelet.wait_for_resource(SERIAL, allocatable=1)
    record = await kubelet.allocate("pod", "main", SERIAL, 1)
    assert record.response.cdi_devices == (f"{SERIAL}={TTY0}",)
    assert record.response.devices == ()  # injected by its CDI spec, once

    spec = assert_valid_spec_file(cdi_dir / "accel-plugins.io-serial.json")
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": SERIAL,
        "devices": [
            {
                "name": TTY0,
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": "/dev/serial/ttyUSB0",
                            "hostPath": "/dev/ttyUSB0",
                            "permissions": "rw",
                        }
                    ]
                },
            }
        ],
    }
    await running.manager.stop()
    assert list(cdi_dir.iterdir()) == []  # nobody serves the devices: no spec names them


async def test_pod_resources_feed_drops_a_vanished_device_once_free(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost, tmp_path: Path
) -> None:
    """The production feed: the kubelet's PodResources API says what pods hold."""
    assert kubelet.pod_resources_socket is not None
    cache = PodResourcesCache(kubelet.pod_resources_socket, max_age=0)
    fake_host.node("/dev/ttyUSB0")
    fake_host.node("/dev/ttyUSB1")
    backends: list[GenericBackend] = []
    make = factory(fake_host, tmp_path, in_use=cache.in_use)

    def build() -> GenericBackend:
        backends.append(make())
        return backends[-1]

    await start_manager(build)
    await kubelet.wait_for_resource(SERIAL, allocatable=2)
    (held,) = (await kubelet.allocate("pod", "main", SERIAL, 1)).device_ids
    await cache.refresh()
    assert cache.in_use(SERIAL) == frozenset({held})

    fake_host.remove("/dev/ttyUSB0")
    fake_host.remove("/dev/ttyUSB1")
    await kubelet.wait_for(lambda k: list(k.resources[SERIAL].devices) == [held])
    assert kubelet.resources[SERIAL].unhealthy == [held]

    kubelet.release("pod")
    await cache.refresh()
    backends[-1].rescan()
    await kubelet.wait_for(lambda k: k.resources[SERIAL].capacity == 0)


@pytest.mark.parametrize(
    ("asks_again", "kept"),
    [
        pytest.param(True, True, id="asked again at the vanish: kept Unhealthy for its pod"),
        pytest.param(False, False, id="the stale list alone: dropped under its pod"),
    ],
)
async def test_a_device_vanishing_soon_after_a_pod_got_it_is_decided_on_a_fresh_list(
    kubelet: Kubelet,
    start_manager: StartManager,
    fake_host: FakeHost,
    tmp_path: Path,
    asks_again: bool,
    kept: bool,
) -> None:
    """Seen on the real node (tests/node): the cache's list predated the pod's allocation
    (it is refreshed when asked, at most every 2 s), so the device its pod held was
    dropped instead of turning Unhealthy. The backend now asks the kubelet again before
    deciding about a device that just vanished."""
    assert kubelet.pod_resources_socket is not None
    cache = PodResourcesCache(kubelet.pod_resources_socket, max_age=3600)  # never by age
    fake_host.node("/dev/ttyUSB0")
    make = factory(
        fake_host,
        tmp_path,
        in_use=cache.in_use,
        refresh_in_use=cache.refresh if asks_again else None,
    )
    await start_manager(make)
    await kubelet.wait_for_resource(SERIAL, allocatable=1)
    await cache.refresh()  # the list as it was before the pod
    assert cache.in_use(SERIAL) == frozenset()
    (held,) = (await kubelet.allocate("pod", "main", SERIAL, 1)).device_ids

    fake_host.remove("/dev/ttyUSB0")
    if kept:
        await kubelet.wait_for(lambda k: k.resources[SERIAL].unhealthy == [held])
        assert list(kubelet.resources[SERIAL].devices) == [held]
    else:
        await kubelet.wait_for(lambda k: k.resources[SERIAL].capacity == 0)


async def test_pod_resources_feed_unknown_without_socket(tmp_path: Path) -> None:
    cache = PodResourcesCache(tmp_path / "absent.sock")
    await cache.refresh()
    assert cache.in_use(SERIAL) is None
    assert not cache.available
