"""Directory device paths, and squat's path discovery table.

``PATH_CASES`` transcribes TestDiscoverPaths of squat's deviceplugin/path_test.go
(github.com/squat/generic-device-plugin, commit 179b1fe): the same config and
file tree, the same device specs and mounts, in the same order. Its files are
device nodes here (ours reports a plain file Unhealthy; squat's never checks).
The directory cases are the shipped DaemonSet's ``audio: /dev/snd``: squat
emits one DeviceSpec for the directory; containerd's ``oci.WithDevices``
expands it (pkg/oci/utils_unix.go ``getDevices``), and ``WALK_CASES`` pins the
walk we copy from it for CDI specs and NUMA nodes.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
import yaml

from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.devdir import expand, is_dir
from accel_plugins.backends.generic.discovery import Discovery, device_id
from accel_plugins.backends.generic.hostfs import HostPaths
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.cdi import CdiSpecWriter, spec_of_devices
from accel_plugins.plugin.device import Device, DeviceNode, Health
from tests.fixtures.generic import FakeHost

Spec = tuple[str, str, str]  # kind ("dev" or "mount"), host path, container path


def discover(host: FakeHost, devices: list[dict[str, object]]) -> list[Device]:
    config = parse_config(yaml.safe_dump({"devices": devices}), "test.yaml")
    (found,) = Discovery(config, HostPaths(host.dev, host.sys)).scan().values()
    return found


def specs(device: Device) -> list[Spec]:
    nodes = [("dev", n.host_path, n.container_path) for n in device.nodes]
    return nodes + [("mount", m.host_path, m.container_path) for m in device.mounts]


def group(*paths: dict[str, object]) -> dict[str, object]:
    return {"name": "d", "groups": [{"paths": list(paths)}]}


SERIAL4 = ("/dev/ttyUSB0", "/dev/ttyUSB1", "/dev/ttyUSB2", "/dev/ttyUSB3")
OPTIONAL: list[dict[str, object]] = [
    {"path": p, "optional": True} for p in ("/dev/ttyS0", "/dev/ttyUSB0", "/dev/ttyUSB1")
]

# (squat's case name, device entry, files on the node, specs of each device)
PATH_CASES: list[tuple[str, dict[str, object], tuple[str, ...], list[list[Spec]]]] = [
    (
        "simple",
        group({"path": "/dev/simple"}),
        ("/dev/simple",),
        [[("dev", "/dev/simple", "/dev/simple")]],
    ),
    (
        "multiple",
        group({"path": "/dev/ttyUSB*", "mountPath": "/dev/ttyUSB0"}),
        SERIAL4,
        [[("dev", p, "/dev/ttyUSB0")] for p in SERIAL4],
    ),
    (
        "multiple with mount directory",
        group({"path": "/dev/ttyUSB*", "mountPath": "/dev/serial/"}),
        SERIAL4,
        [[("dev", p, "/dev/serial/" + os.path.basename(p))] for p in SERIAL4],
    ),
    (
        "only one exists",
        group({"path": "/dev/does/not/exist"}, {"path": "/dev/does/exist"}),
        ("/dev/does/exist",),
        [],
    ),
    (
        "optional paths - some missing",
        group(*OPTIONAL),
        ("/dev/ttyUSB0",),
        [[("dev", "/dev/ttyUSB0", "/dev/ttyUSB0")]],
    ),
    (
        "optional paths - all present",
        group(*OPTIONAL),
        ("/dev/ttyS0", "/dev/ttyUSB0", "/dev/ttyUSB1"),
        [[("dev", p, p) for p in ("/dev/ttyS0", "/dev/ttyUSB0", "/dev/ttyUSB1")]],
    ),
    ("optional paths - all missing", group(*OPTIONAL), (), []),
    (
        "mount directory",
        group({"path": "/dev/input", "type": "Mount"}),
        ("/dev/input/event0", "/dev/input/event1", "/dev/input/event2"),
        [[("mount", "/dev/input", "/dev/input")]],
    ),
]


@pytest.mark.parametrize(
    ("entry", "files", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in PATH_CASES],
)
def test_squat_discover_paths_table(
    fake_host: FakeHost,
    entry: dict[str, object],
    files: tuple[str, ...],
    expected: list[list[Spec]],
) -> None:
    for path in files:
        fake_host.node(path)
    devices = discover(fake_host, [entry])
    assert [specs(d) for d in devices] == expected
    assert all(d.health is Health.HEALTHY for d in devices)


# (case, device entry, specs of the one device) on a node with /dev/snd/{controlC0,pcmC0D0c}
DIRECTORY_CASES: list[tuple[str, dict[str, object], list[Spec]]] = [
    # squat's manifests/generic-device-plugin.yaml: `audio`, a directory, count 10.
    ("squat's audio", group({"path": "/dev/snd"}), [("dev", "/dev/snd", "/dev/snd")]),
    (
        "mountPath renames it",
        group({"path": "/dev/snd", "mountPath": "/dev/sound"}),
        [("dev", "/dev/snd", "/dev/sound")],
    ),
    (
        "mountPath ending in / keeps its name",
        group({"path": "/dev/snd", "mountPath": "/dev/audio/"}),
        [("dev", "/dev/snd", "/dev/audio/snd")],
    ),
    ("a glob may match it", group({"path": "/dev/sn?"}), [("dev", "/dev/snd", "/dev/snd")]),
    (
        "zipped with a node",
        group({"path": "/dev/snd"}, {"path": "/dev/fuse"}),
        [("dev", "/dev/snd", "/dev/snd"), ("dev", "/dev/fuse", "/dev/fuse")],
    ),
]


@pytest.mark.parametrize(
    ("entry", "expected"), [pytest.param(*case[1:], id=case[0]) for case in DIRECTORY_CASES]
)
def test_a_directory_is_one_healthy_device_spec_as_in_squat(
    fake_host: FakeHost, entry: dict[str, object], expected: list[Spec]
) -> None:
    for path in ("/dev/snd/controlC0", "/dev/snd/pcmC0D0c", "/dev/fuse"):
        fake_host.node(path)
    (device,) = discover(fake_host, [entry])
    assert specs(device) == expected
    assert device.health is Health.HEALTHY
    assert device.id == device_id(0, [s[1] for s in expected])


def test_count_replicates_a_directory_with_squats_ids(fake_host: FakeHost) -> None:
    fake_host.node("/dev/snd/controlC0")
    devices = discover(
        fake_host, [{"name": "audio", "groups": [{"count": 10, "paths": [{"path": "/dev/snd"}]}]}]
    )
    assert [d.id for d in devices] == [device_id(j, ["/dev/snd"]) for j in range(10)]
    assert all(d.healthy for d in devices)


def test_an_empty_directory_is_healthy_and_a_missing_one_absent(fake_host: FakeHost) -> None:
    fake_host.local("/dev/snd").mkdir()
    (device,) = discover(fake_host, [group({"path": "/dev/snd"})])
    assert device.health is Health.HEALTHY  # squat lists it; the runtime finds no node in it
    fake_host.remove("/dev/snd")
    assert discover(fake_host, [group({"path": "/dev/snd"})]) == []


def test_numa_of_a_directory_is_that_of_its_nodes(fake_host: FakeHost) -> None:
    dev = fake_host.node("/dev/snd/controlC0", major=116, minor=0)
    fake_host.sys_device("pci0000:00/0000:00:1f.3/sound/card0/controlC0", dev=dev)
    fake_host.write("/sys/devices/pci0000:00/0000:00:1f.3/numa_node", "1")
    (device,) = discover(fake_host, [group({"path": "/dev/snd"})])
    assert device.numa_nodes == (1,)


# containerd's getDevices walk: (entry under /dev/snd, kind) -> in the expansion?
WALK_CASES = [
    pytest.param("controlC0", "char", True, id="character-node"),
    pytest.param("sdz", "block", True, id="block-node"),
    pytest.param("sub/pcmC0D0c", "char", True, id="nested-directory-recursed"),
    pytest.param("pts/0", "char", False, id="pts-skipped"),
    pytest.param("shm/x", "char", False, id="shm-skipped"),
    pytest.param("fd/x", "char", False, id="fd-skipped"),
    pytest.param("mqueue/x", "char", False, id="mqueue-skipped"),
    pytest.param(".udev/x", "char", False, id="udev-skipped"),
    pytest.param("console", "char", False, id="console-skipped"),
    pytest.param("fifo", "fifo", False, id="fifo-skipped"),
    pytest.param("notes", "file", False, id="plain-file-skipped"),
    pytest.param("by-path/link", "symlink", False, id="symlink-not-followed"),
]


@pytest.mark.parametrize(("entry", "kind", "included"), WALK_CASES)
def test_expansion_walks_as_containerd_does(
    fake_host: FakeHost, entry: str, kind: str, included: bool
) -> None:
    host_path = f"/dev/snd/{entry}"
    local = fake_host.local(host_path)
    local.parent.mkdir(parents=True, exist_ok=True)
    if kind in ("char", "block"):
        fake_host.node(host_path, block=kind == "block")
    elif kind == "fifo":
        os.mkfifo(local)
    elif kind == "file":
        local.write_text("x")
    else:
        fake_host.node("/dev/target")
        local.symlink_to(fake_host.local("/dev/target"))
    host = HostPaths(fake_host.dev, fake_host.sys)
    got = expand(host, DeviceNode("/dev/snd", "/dev/audio", "rw"))
    want = [DeviceNode(host_path, f"/dev/audio/{entry}", "rw")] if included else []
    assert got == want


def test_expansion_of_a_node_is_the_node_and_order_is_by_name(fake_host: FakeHost) -> None:
    for name in ("timer", "controlC0", "by-path/x", "seq"):
        fake_host.node(f"/dev/snd/{name}")
    host = HostPaths(fake_host.dev, fake_host.sys)
    node = DeviceNode("/dev/snd/seq", "/dev/snd/seq", "mrw")
    assert expand(host, node) == [node]
    assert not is_dir(host, "/dev/snd/seq")
    assert is_dir(host, "/dev/snd")
    walked = [n.host_path for n in expand(host, DeviceNode("/dev/snd", "/dev/snd", "mrw"))]
    assert walked == ["/dev/snd/by-path/x", "/dev/snd/controlC0", "/dev/snd/seq", "/dev/snd/timer"]


def test_cdi_spec_lists_the_nodes_inside_a_directory(fake_host: FakeHost, tmp_path: Path) -> None:
    # CDI's deviceNodes must be device nodes: the library refuses a directory.
    fake_host.node("/dev/snd/controlC0")
    fake_host.node("/dev/snd/pcmC0D0c")
    host = HostPaths(fake_host.dev, fake_host.sys)
    (device,) = discover(fake_host, [group({"path": "/dev/snd", "mountPath": "/dev/audio/"})])
    (path,) = CdiSpecWriter(tmp_path).sync(
        [spec_of_devices("squat.ai/audio", {device.id: device}, lambda n: expand(host, n))]
    )
    (entry,) = json.loads(path.read_text())["devices"]
    assert entry["containerEdits"]["deviceNodes"] == [
        {"path": f"/dev/audio/snd/{n}", "hostPath": f"/dev/snd/{n}", "permissions": "mrw"}
        for n in ("controlC0", "pcmC0D0c")
    ]


@pytest.mark.parametrize("path", ["/dev", "/dev/"])
def test_the_config_refuses_all_of_dev_as_one_device(path: str) -> None:
    # Squat accepts it; the runtime would then create every host device in the container.
    with pytest.raises(ConfigError, match="every device node of the host"):
        parse_config(f"devices: [{{name: d, groups: [{{paths: [{{path: {path}}}]}}]}}]")


def test_the_config_still_refuses_a_device_directory_outside_dev() -> None:
    with pytest.raises(ConfigError, match="outside /dev"):
        parse_config(textwrap.dedent("devices: [{name: d, groups: [{paths: [{path: /etc}]}]}]"))
