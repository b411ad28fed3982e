"""Discovery over a fake host: globs, zipping, replicas, mounts, USB, NUMA, IDs."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.discovery import Discovery, device_id
from accel_plugins.backends.generic.hostfs import HostPaths
from accel_plugins.plugin.device import Device, DeviceNode, Health, Mount
from tests.fixtures.generic import FakeHost


def discover(host: FakeHost, yaml_text: str) -> dict[str, list[Device]]:
    config = parse_config(textwrap.dedent(yaml_text), "test.yaml")
    return Discovery(config, HostPaths(host.dev, host.sys)).scan()


def nodes_of(devices: list[Device]) -> list[list[str]]:
    return [[n.host_path for n in d.nodes] for d in devices]


def test_a_glob_gives_one_device_per_node_in_sorted_order(fake_host: FakeHost) -> None:
    for name in ("ttyUSB1", "ttyUSB0", "ttyACM0"):
        fake_host.node(f"/dev/{name}")
    found = discover(
        fake_host, "devices: [{name: serial, groups: [{paths: [{path: /dev/ttyUSB*}]}]}]"
    )
    (devices,) = found.values()
    assert nodes_of(devices) == [["/dev/ttyUSB0"], ["/dev/ttyUSB1"]]
    assert devices[0].nodes == (DeviceNode("/dev/ttyUSB0", "/dev/ttyUSB0", "mrw"),)
    assert all(d.health is Health.HEALTHY for d in devices)


def test_ids_are_squats_hash_of_replica_and_paths(fake_host: FakeHost) -> None:
    fake_host.node("/dev/ttyUSB0")
    (devices,) = discover(
        fake_host, "devices: [{name: s, groups: [{count: 2, paths: [{path: /dev/ttyUSB0}]}]}]"
    ).values()
    assert [d.id for d in devices] == [
        hashlib.sha1(b"0/dev/ttyUSB0").hexdigest(),
        hashlib.sha1(b"1/dev/ttyUSB0").hexdigest(),
    ]
    assert device_id(1, ["/dev/a", "/dev/b"]) == hashlib.sha1(b"1/dev/a/dev/b").hexdigest()


def test_ids_do_not_depend_on_where_dev_is_seen(tmp_path: Path) -> None:
    text = "devices: [{name: s, groups: [{count: 3, paths: [{path: /dev/tty*}]}]}]"
    ids = []
    for place in ("one", "two"):
        host = FakeHost(tmp_path / place)
        host.node("/dev/ttyS0")
        host.node("/dev/ttyS1")
        ids.append([d.id for d in discover(host, text)["s"]])
    assert ids[0] == ids[1]
    assert len(set(ids[0])) == 6


ZIP = [
    pytest.param(
        ["/dev/a*", "/dev/b*"],
        {"a": 3, "b": 3},
        "",
        [["a0", "b0"], ["a1", "b1"], ["a2", "b2"]],
        id="equal-lengths-pair-up",
    ),
    pytest.param(["/dev/a*", "/dev/b*"], {"a": 3, "b": 1}, "", [["a0", "b0"]], id="shortest-wins"),
    pytest.param(
        ["/dev/a*", "/dev/b*"],
        {"a": 3, "b": 1},
        "limit: 3",
        [["a0", "b0"], ["a1", "b0"], ["a2", "b0"]],
        id="limit-reuses-a-path",
    ),
    pytest.param(
        ["/dev/a*", "/dev/b*"],
        {"a": 3, "b": 1},
        "limit: 2",
        [["a0", "b0"], ["a1", "b0"]],
        id="limit-caps-reuse",
    ),
    pytest.param(["/dev/a*", "/dev/b*"], {"a": 2, "b": 0}, "", [], id="missing-path-blocks-group"),
    pytest.param(
        ["/dev/a*", "/dev/b*"],
        {"a": 2, "b": 0},
        "optional: true",
        [["a0"], ["a1"]],
        id="optional-path-left-out",
    ),
    pytest.param(
        ["/dev/a*", "/dev/b*"],
        {"a": 2, "b": 1},
        "optional: true",
        [["a0", "b0"]],
        id="optional-path-zipped-when-present",
    ),
]


@pytest.mark.parametrize(("patterns", "present", "second_keys", "expected"), ZIP)
def test_several_paths_are_zipped(
    fake_host: FakeHost,
    patterns: list[str],
    present: dict[str, int],
    second_keys: str,
    expected: list[list[str]],
) -> None:
    for prefix, count in present.items():
        for i in range(count):
            fake_host.node(f"/dev/{prefix}{i}")
    extra = f", {second_keys}" if second_keys else ""
    text = f"""
    devices:
      - name: pair
        groups:
          - paths:
              - {{path: "{patterns[0]}"}}
              - {{path: "{patterns[1]}"{extra}}}
    """
    found = discover(fake_host, text)["pair"]
    assert nodes_of(found) == [[f"/dev/{n}" for n in unit] for unit in expected]


def test_mount_path_directory_keeps_the_file_name(fake_host: FakeHost) -> None:
    fake_host.node("/dev/snd/pcmC0D0p")
    fake_host.node("/dev/video3")
    found = discover(
        fake_host,
        """
        devices:
          - name: audio
            groups: [{paths: [{path: /dev/snd/pcm*, mountPath: /dev/audio/, permissions: rw}]}]
          - name: cam
            groups: [{paths: [{path: /dev/video*, mountPath: /dev/video0}]}]
        """,
    )
    assert found["audio"][0].nodes == (
        DeviceNode("/dev/snd/pcmC0D0p", "/dev/audio/pcmC0D0p", "rw"),
    )
    assert found["cam"][0].nodes == (DeviceNode("/dev/video3", "/dev/video0", "mrw"),)


def test_mount_type_paths_become_mounts(fake_host: FakeHost, tmp_path: Path) -> None:
    fake_host.node("/dev/fpga0")
    bitstreams = tmp_path / "bitstreams"
    bitstreams.mkdir()
    found = discover(
        fake_host,
        f"""
        devices:
          - name: fpga
            groups:
              - paths:
                  - {{path: /dev/fpga0}}
                  - {{path: {bitstreams}, mountPath: /lib/firmware, type: Mount, readOnly: true}}
        """,
    )
    (device,) = found["fpga"]
    assert device.nodes == (DeviceNode("/dev/fpga0", "/dev/fpga0", "mrw"),)
    assert device.mounts == (Mount(str(bitstreams), "/lib/firmware", read_only=True),)
    assert device.health is Health.HEALTHY
    assert device.id == device_id(0, ["/dev/fpga0", str(bitstreams)])


HEALTH = [
    pytest.param("char", Health.HEALTHY, id="character-device"),
    pytest.param("block", Health.HEALTHY, id="block-device"),
    pytest.param("file", Health.UNHEALTHY, id="regular-file"),
]


@pytest.mark.parametrize(("kind", "health"), HEALTH)
def test_a_matched_path_must_be_a_device_node(
    fake_host: FakeHost, kind: str, health: Health
) -> None:
    if kind == "file":
        fake_host.regular_file("/dev/sdz")
    else:
        fake_host.node("/dev/sdz", major=8, block=kind == "block")
    (device,) = discover(fake_host, "devices: [{name: d, groups: [{paths: [{path: /dev/sdz}]}]}]")[
        "d"
    ]
    assert device.health is health


NUMA = [
    pytest.param("1", (1,), id="node-1"),
    pytest.param("-1", (), id="no-node"),
    pytest.param(None, (), id="no-attribute"),
]


@pytest.mark.parametrize(("numa_node", "expected"), NUMA)
def test_numa_node_comes_from_the_nearest_sysfs_ancestor(
    fake_host: FakeHost, numa_node: str | None, expected: tuple[int, ...]
) -> None:
    dev = fake_host.node("/dev/accel0", major=261, minor=0)
    pci = "pci0000:80/0000:80:01.0/0000:81:00.0"
    fake_host.sys_device(pci, {"numa_node": numa_node} if numa_node is not None else {})
    fake_host.sys_device(f"{pci}/accel/accel0", {"dev": "261:0"}, dev=dev)
    (device,) = discover(
        fake_host, "devices: [{name: a, groups: [{paths: [{path: /dev/accel0}]}]}]"
    )["a"]
    assert device.numa_nodes == expected


USB = [
    pytest.param(
        '{vendor: "1a86", product: "7523"}',
        ["/dev/bus/usb/001/004", "/dev/bus/usb/002/009"],
        id="all-of-a-model",
    ),
    pytest.param(
        '{vendor: "1a86", product: "7523", serial: "B2"}', ["/dev/bus/usb/002/009"], id="by-serial"
    ),
    pytest.param('{vendor: "1A86", product: "0x7523", serial: "nope"}', [], id="serial-absent"),
    pytest.param('{vendor: "0403", product: "6001"}', [], id="other-model"),
]


@pytest.mark.parametrize(("spec", "nodes"), USB)
def test_usb_ids_select_bus_nodes_as_one_device(
    fake_host: FakeHost, spec: str, nodes: list[str]
) -> None:
    fake_host.usb_device("1-2", "1a86", "7523", bus=1, address=4, serial="A1")
    fake_host.usb_device("2-1", "1a86", "7523", bus=2, address=9, serial="B2")
    fake_host.usb_device("2-3", "046d", "c52b", bus=2, address=3)
    found = discover(fake_host, f"devices: [{{name: ch340, groups: [{{usb: [{spec}]}}]}}]")["ch340"]
    if not nodes:
        assert found == []
        return
    (device,) = found
    assert [(n.host_path, n.container_path, n.permissions) for n in device.nodes] == [
        (n, n, "rw") for n in nodes
    ]
    assert device.id == device_id(0, nodes)


def test_overlapping_groups_offer_a_node_once(fake_host: FakeHost) -> None:
    fake_host.node("/dev/ttyUSB0")
    found = discover(
        fake_host,
        "devices: [{name: s, groups: [{paths: [{path: /dev/ttyUSB0}]}, "
        "{paths: [{path: /dev/tty*}]}]}]",
    )
    assert nodes_of(found["s"]) == [["/dev/ttyUSB0"]]


def test_every_resource_is_listed_even_without_devices(fake_host: FakeHost) -> None:
    found = discover(
        fake_host, "devices: [{name: none, groups: [{paths: [{path: /dev/nothing*}]}]}]"
    )
    assert found == {"none": []}


WATCH = [
    pytest.param("/dev/ttyUSB*", [], ["."], id="top-level-glob"),
    pytest.param("/dev/snd/pcm*", [], ["."], id="missing-directory-watches-parent"),
    pytest.param("/dev/snd/pcm*", ["snd"], ["snd"], id="existing-directory"),
    pytest.param(
        "/dev/bus/usb/*/*",
        ["bus/usb/001", "bus/usb/002"],
        ["bus/usb", "bus/usb/001", "bus/usb/002"],
        id="glob-in-directory",
    ),
]


@pytest.mark.parametrize(("pattern", "dirs", "watched"), WATCH)
def test_watch_dirs_cover_where_matches_can_appear(
    fake_host: FakeHost, pattern: str, dirs: list[str], watched: list[str]
) -> None:
    for directory in dirs:
        (fake_host.dev / directory).mkdir(parents=True)
    config = parse_config(f'devices: [{{name: x, groups: [{{paths: [{{path: "{pattern}"}}]}}]}}]')
    discovery = Discovery(config, HostPaths(fake_host.dev, fake_host.sys))
    discovery.scan()
    assert discovery.watch_dirs() == {fake_host.dev / w for w in watched}
