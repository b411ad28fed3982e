"""The framework's CDI spec writer (accel_plugins/plugin/cdi.py), used by every backend.

Contents as CDI's SPEC.md defines them (``cdiVersion``, ``kind``, ``devices[].name``,
``containerEdits`` with ``env``, ``deviceNodes``, ``mounts``, ``hooks``), file names as
the CDI library's ``GenerateSpecName`` (``<vendor>-<class>``), atomic replacement,
rewrites only on change, removal of what is no longer served. Every spec is checked
against the CDI project's JSON schema (tests/support/cdi.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.plugin.cdi import (
    CdiDevice,
    CdiHook,
    CdiMount,
    CdiSpec,
    CdiSpecWriter,
    ContainerEdits,
    device_edits,
    minimum_version,
    qualified_name,
    spec_of_devices,
)
from accel_plugins.plugin.device import Device, DeviceNode, Mount
from accel_plugins.runtime.cdi_defined import DefinedDevices
from tests.support.cdi import assert_valid_spec, assert_valid_spec_file

KIND = "accel-plugins.io/fpga"
DEVICES = {
    "f1": Device(
        "f1",
        nodes=(DeviceNode("/dev/fpga1", "/dev/fpga0", "rw"),),
        mounts=(Mount("/srv/bits", "/lib/firmware", read_only=True),),
        envs={"FPGA": "1"},
    ),
    "f0": Device("f0", nodes=(DeviceNode("/dev/fpga0", "/dev/fpga0", "mrw"),)),
}


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        pytest.param({"kind": "a.com/b", "devices": [{"name": "x"}]}, "0.3.0", id="base"),
        pytest.param(
            {
                "kind": "a.com/b",
                "devices": [{"name": "x"}],
                "containerEdits": {"mounts": [{"hostPath": "/a", "type": "tmpfs"}]},
            },
            "0.4.0",
            id="mount-type",
        ),
        pytest.param({"kind": "a.com/b", "devices": [{"name": "0"}]}, "0.5.0", id="digit-name"),
        pytest.param(
            {
                "kind": "a.com/b",
                "devices": [
                    {
                        "name": "x",
                        "containerEdits": {"deviceNodes": [{"path": "/a", "hostPath": "/b"}]},
                    }
                ],
            },
            "0.5.0",
            id="node-host-path",
        ),
        pytest.param(
            {"kind": "a.com/b", "devices": [{"name": "x", "annotations": {"k": "v"}}]},
            "0.6.0",
            id="device-annotations",
        ),
        pytest.param({"kind": "a.com/b.c", "devices": [{"name": "x"}]}, "0.6.0", id="dotted-class"),
        pytest.param(
            {
                "kind": "a.com/b",
                "devices": [{"name": "0"}],
                "containerEdits": {"deviceNodes": [{"path": "/a", "additionalGids": [44]}]},
            },
            "0.7.0",
            id="additional-gids",
        ),
    ],
)
def test_the_minimum_version_a_spec_needs(spec: dict[str, Any], version: str) -> None:
    """The rules of CDI's specs-go/version.go (MinimumRequiredVersion) for what we write."""
    assert minimum_version(spec) == version


def test_a_spec_of_framework_devices_lists_each_with_its_edits() -> None:
    spec = spec_of_devices(KIND, DEVICES)
    assert spec.file_name == "accel-plugins.io-fpga.json"
    assert spec.to_json() == {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [
            {
                "name": "f0",
                "containerEdits": {
                    # hostPath only where it differs, as the CDI library writes nodes
                    "deviceNodes": [{"path": "/dev/fpga0", "permissions": "mrw"}]
                },
            },
            {
                "name": "f1",
                "containerEdits": {
                    "env": ["FPGA=1"],
                    "deviceNodes": [
                        {"path": "/dev/fpga0", "hostPath": "/dev/fpga1", "permissions": "rw"}
                    ],
                    "mounts": [
                        {
                            "hostPath": "/srv/bits",
                            "containerPath": "/lib/firmware",
                            "options": ["bind", "ro"],
                        }
                    ],
                },
            },
        ],
    }
    assert_valid_spec(spec.to_json())
    assert qualified_name(KIND, "f0") == "accel-plugins.io/fpga=f0"


def test_expand_lists_the_nodes_a_runtime_creates() -> None:
    """A directory path becomes the nodes inside it (the generic backend's /dev/snd)."""
    inside = (DeviceNode("/dev/snd/controlC0"), DeviceNode("/dev/snd/pcmC0D0c"))
    device = Device("snd", nodes=(DeviceNode("/dev/snd"),))
    assert device_edits(device, lambda _: inside).device_nodes == inside


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        pytest.param(ContainerEdits(), {}, id="empty"),
        pytest.param(
            ContainerEdits(hooks=(CdiHook("createContainer", "/usr/bin/hook", ("hook", "x")),)),
            {
                "hooks": [
                    {"hookName": "createContainer", "path": "/usr/bin/hook", "args": ["hook", "x"]}
                ]
            },
            id="hook-without-env",
        ),
        pytest.param(
            ContainerEdits(mounts=(CdiMount("/run/s", "/run/s"),)),
            {"mounts": [{"hostPath": "/run/s", "containerPath": "/run/s"}]},
            id="mount-without-options",
        ),
    ],
)
def test_container_edits_leave_out_what_is_empty(edits: ContainerEdits, expected: object) -> None:
    assert edits.to_json() == expected


def test_merged_edits_keep_each_entry_once_in_order() -> None:
    a = ContainerEdits(env=("A=1",), device_nodes=(DeviceNode("/dev/a"), DeviceNode("/dev/c")))
    b = ContainerEdits(
        env=("A=1", "B=2"), device_nodes=(DeviceNode("/dev/b"), DeviceNode("/dev/a"))
    )
    assert a.merged(b) == ContainerEdits(
        env=("A=1", "B=2"),
        device_nodes=(DeviceNode("/dev/a"), DeviceNode("/dev/c"), DeviceNode("/dev/b")),
    )


def spec(*names: str, kind: str = KIND) -> CdiSpec:
    edits = ContainerEdits(device_nodes=(DeviceNode("/dev/null"),))
    return CdiSpec(kind, tuple(CdiDevice(n, edits) for n in names))


def test_written_atomically_rewritten_only_on_change(tmp_path: Path) -> None:
    writer = CdiSpecWriter(tmp_path / "cdi")
    (path,) = writer.sync([spec("a", "b")])
    assert path == tmp_path / "cdi" / "accel-plugins.io-fpga.json"
    assert_valid_spec_file(path)
    inode = path.stat().st_ino
    assert writer.sync([spec("a", "b")]) == []  # unchanged: not written
    assert path.stat().st_ino == inode
    assert writer.sync([spec("a")]) == [path]
    assert path.stat().st_ino != inode  # renamed into place, never edited in place
    assert [d["name"] for d in json.loads(path.read_text())["devices"]] == ["a"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporaries


def test_a_spec_without_devices_or_no_longer_given_is_removed(tmp_path: Path) -> None:
    writer = CdiSpecWriter(tmp_path)
    other = spec("x", kind="accel-plugins.io/other")
    writer.sync([spec("a"), other])
    writer.sync([spec(), other])  # no devices: CDI refuses such a spec
    assert sorted(p.name for p in tmp_path.iterdir()) == ["accel-plugins.io-other.json"]
    writer.sync([])
    assert list(tmp_path.iterdir()) == []


def test_remove_all_leaves_files_it_did_not_write(tmp_path: Path) -> None:
    foreign = tmp_path / "nvidia.com-gpu.yaml"  # e.g. nvidia-ctk cdi generate's
    foreign.write_text("cdiVersion: 0.5.0\n")
    writer = CdiSpecWriter(tmp_path)
    writer.sync([spec("a")])
    (tmp_path / "accel-plugins.io-fpga.json").unlink()  # someone removed it: fine
    writer.remove_all()
    assert list(tmp_path.iterdir()) == [foreign]
    assert writer.paths == []


def test_an_unwritable_directory_raises_oserror(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):  # an OSError: the caller decides what follows
        CdiSpecWriter(tmp_path / "file" / "cdi").sync([spec("a")])


# -- after a reboot or a hand: restore() and what the directory defines -------------------


def _empty(path: Path) -> None:
    path.unlink()


def _garble(path: Path) -> None:
    path.write_text("{}")


def _keep(path: Path) -> None:
    pass


@pytest.mark.parametrize(
    ("damage", "rewritten"),
    [
        pytest.param(_empty, True, id="file-removed (a reboot empties /var/run/cdi)"),
        pytest.param(_garble, True, id="file-changed"),
        pytest.param(_keep, False, id="untouched: not written"),
    ],
)
def test_restore_writes_again_what_is_missing_or_changed_on_disk(
    tmp_path: Path, damage: Callable[[Path], None], rewritten: bool
) -> None:
    writer = CdiSpecWriter(tmp_path / "cdi")
    (path,) = writer.sync([spec("a", "b")])
    text = path.read_text()
    damage(path)
    assert writer.restore() == ([path] if rewritten else [])
    assert path.read_text() == text
    assert DefinedDevices(tmp_path / "cdi").read() == {f"{KIND}=a", f"{KIND}=b"}


def test_restore_of_an_emptied_directory_recreates_it(tmp_path: Path) -> None:
    writer = CdiSpecWriter(tmp_path / "cdi")
    writer.sync([spec("a")])
    shutil.rmtree(tmp_path / "cdi")
    assert writer.restore() == [tmp_path / "cdi" / "accel-plugins.io-fpga.json"]
    shutil.rmtree(tmp_path / "cdi")
    (tmp_path / "cdi").write_text("")  # a file where the directory belongs
    with pytest.raises(NotADirectoryError):  # an OSError: the caller refuses the answer
        writer.restore()


def test_defined_devices_reads_every_json_spec_and_skips_what_does_not_parse(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "cdi"
    defined = DefinedDevices(directory)
    assert defined.read() == frozenset()  # no directory yet: nothing defined
    CdiSpecWriter(directory).sync([spec("a"), spec("x", kind="accel-plugins.io/other")])
    (directory / "broken.json").write_text("{not json")
    (directory / "vendor.yaml").write_text("kind: v.com/c\ndevices: [{name: y}]\n")
    assert defined.read() == {f"{KIND}=a", "accel-plugins.io/other=x"}
    assert defined.missing((f"{KIND}=a", f"{KIND}=gone")) == [f"{KIND}=gone"]
    (directory / "accel-plugins.io-other.json").unlink()
    assert defined.missing(("accel-plugins.io/other=x",)) == ["accel-plugins.io/other=x"]
