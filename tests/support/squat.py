"""squat's generic-device-plugin as its users run it: the shipped DaemonSet's container args.

``DAEMONSET_CONTAINER_ARGS`` is the ``args`` list of the container in
manifests/generic-device-plugin.yaml of github.com/squat/generic-device-plugin
(commit 179b1fe), copied verbatim (the manifest's text, read as YAML as kubectl
reads it): five ``--device`` flags, each a YAML document, and nothing else (no
host path to replace: the devices' /dev paths go through our ``--dev-root``).
squat reads each value with ghodss/yaml into a DeviceSpec (config.go); a config
file holds the same entries under ``devices`` (viper's alias of ``device``). Our
chart takes that list as ``devices``, our config file as ``devices`` too, and
``accel-plugins generic`` takes the args themselves.
"""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from accel_plugins import testing

# Verbatim from the manifest (its indentation kept), the container's args only.
_MANIFEST_ARGS = """\
        args:
        - --device
        - |
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
        - --device
        - |
          name: video
          groups:
            - paths:
                - path: /dev/video0
        - --device
        - |
          name: fuse
          groups:
            - count: 10
              paths:
                - path: /dev/fuse
        - --device
        - |
          name: audio
          groups:
            - count: 10
              paths:
                - path: /dev/snd
        - --device
        - |
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
"""

DAEMONSET_CONTAINER_ARGS: tuple[str, ...] = tuple(
    yaml.safe_load(textwrap.dedent(_MANIFEST_ARGS))["args"]
)

# The value of every --device flag, each YAML document as the container receives it.
DAEMONSET_DEVICE_ARGS: tuple[str, ...] = DAEMONSET_CONTAINER_ARGS[1::2]
assert DAEMONSET_CONTAINER_ARGS[0::2] == ("--device",) * len(DAEMONSET_DEVICE_ARGS)


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
