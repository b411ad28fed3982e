"""squat's generic-device-plugin as its users run it: the shipped DaemonSet's device list.

``DAEMONSET_DEVICE_ARGS`` is the text of every ``--device`` argument of
manifests/generic-device-plugin.yaml in github.com/squat/generic-device-plugin
(commit 179b1fe), each YAML document exactly as shipped (indentation removed).
squat reads each with sigs.k8s.io/yaml into a DeviceSpec; a config file holds
the same entries under ``devices`` (viper's alias of ``device``). Our chart
takes that list as ``devices`` and our config file as ``devices`` too.
"""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from accel_plugins import testing

DAEMONSET_DEVICE_ARGS = (
    """\
name: serial
groups:
  - paths:
      - path: /dev/ttyUSB*
  - paths:
      - path: /dev/ttyACM*
  - paths:
      - path: /dev/tty.usb*
  - paths:
      - path: /dev/cu.*
  - paths:
      - path: /dev/cuaU*
  - paths:
      - path: /dev/rfcomm*
""",
    """\
name: video
groups:
  - paths:
      - path: /dev/video0
""",
    """\
name: fuse
groups:
  - count: 10
    paths:
      - path: /dev/fuse
""",
    """\
name: audio
groups:
  - count: 10
    paths:
      - path: /dev/snd
""",
    """\
name: capture
groups:
  - paths:
      - path: /dev/snd/controlC0
      - path: /dev/snd/pcmC0D0c
  - paths:
      - path: /dev/snd/controlC1
        mountPath: /dev/snd/controlC0
      - path: /dev/snd/pcmC1D0c
        mountPath: /dev/snd/pcmC0D0c
  - paths:
      - path: /dev/snd/controlC2
        mountPath: /dev/snd/controlC0
      - path: /dev/snd/pcmC2D0c
        mountPath: /dev/snd/pcmC0D0c
  - paths:
      - path: /dev/snd/controlC3
        mountPath: /dev/snd/controlC0
      - path: /dev/snd/pcmC3D0c
        mountPath: /dev/snd/pcmC0D0c
""",
)


def squat_devices() -> list[dict[str, Any]]:
    """The DaemonSet's devices as one list, as a config file or chart values hold them."""
    return [yaml.safe_load(doc) for doc in DAEMONSET_DEVICE_ARGS]


def squat_config_text() -> str:
    """A config file of the DaemonSet's devices: each ``--device`` document under ``devices``."""
    items = "".join("  - " + textwrap.indent(doc, "    ").lstrip() for doc in DAEMONSET_DEVICE_ARGS)
    return "devices:\n" + items


# A node with two USB serial adapters, a camera, FUSE and two sound cards (ALSA's
# /dev/snd: control, capture and playback nodes, the sequencer and timer, and
# udev's by-path symlinks).
NODE_DEV = {
    "/dev/ttyUSB0": (188, 0),
    "/dev/ttyACM0": (166, 0),
    "/dev/video0": (81, 0),
    "/dev/fuse": (10, 229),
    "/dev/snd/controlC0": (116, 0),
    "/dev/snd/pcmC0D0c": (116, 1),
    "/dev/snd/pcmC0D0p": (116, 2),
    "/dev/snd/controlC1": (116, 3),
    "/dev/snd/pcmC1D0c": (116, 4),
    "/dev/snd/seq": (116, 5),
    "/dev/snd/timer": (116, 6),
}


def build_node_dev(host: testing.FakeHost) -> None:
    for path, (major, minor) in NODE_DEV.items():
        host.node(path, major=major, minor=minor)
    by_path = host.local("/dev/snd/by-path")
    by_path.mkdir()
    (by_path / "pci-0000:00:1f.3").symlink_to("../controlC0")
