"""CDI spec files: contents, atomic replacement, removal when a resource is empty."""

from __future__ import annotations

import json
from pathlib import Path

from accel_plugins.backends.generic import cdi
from accel_plugins.plugin.device import Device, DeviceNode, Mount

KIND = "accel-plugins.io/fpga"
DEVICES = {
    "f1": Device(
        "f1",
        nodes=(DeviceNode("/dev/fpga1", "/dev/fpga0", "rw"),),
        mounts=(Mount("/srv/bits", "/lib/firmware", read_only=True),),
    ),
    "f0": Device("f0", nodes=(DeviceNode("/dev/fpga0", "/dev/fpga0", "mrw"),)),
}


def test_spec_lists_every_device_with_its_edits(tmp_path: Path) -> None:
    path = cdi.write_spec(tmp_path, KIND, DEVICES)
    assert path == tmp_path / "accel-plugins.io-fpga.json"
    assert json.loads(path.read_text()) == {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [
            {
                "name": "f0",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": "/dev/fpga0", "hostPath": "/dev/fpga0", "permissions": "mrw"}
                    ]
                },
            },
            {
                "name": "f1",
                "containerEdits": {
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
    assert cdi.qualified_name(KIND, "f0") == "accel-plugins.io/fpga=f0"


def test_rewriting_replaces_the_file_and_leaves_no_temporaries(tmp_path: Path) -> None:
    first = cdi.write_spec(tmp_path, KIND, DEVICES)
    inode = first.stat().st_ino
    cdi.write_spec(tmp_path, KIND, {"f0": DEVICES["f0"]})
    assert [p.name for p in tmp_path.iterdir()] == [first.name]
    assert first.stat().st_ino != inode  # renamed into place, never edited in place
    assert [d["name"] for d in json.loads(first.read_text())["devices"]] == ["f0"]


def test_a_resource_without_devices_has_no_spec(tmp_path: Path) -> None:
    path = cdi.sync_spec(tmp_path, KIND, DEVICES)
    assert path is not None
    assert path.exists()
    assert cdi.sync_spec(tmp_path, KIND, {}) is None
    assert not path.exists()
    assert cdi.sync_spec(tmp_path, KIND, {}) is None  # already gone: fine
