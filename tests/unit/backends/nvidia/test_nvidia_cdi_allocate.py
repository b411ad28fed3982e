"""CDI names in Allocate answers: NVIDIA's ``TestCDIAllocateResponse`` as a golden table.

Each row is a case of ``TestCDIAllocateResponse`` in NVIDIA's
``internal/plugin/server_test.go`` (its description is the row's id). NVIDIA's
test mocks the CDI handler with vendor ``nvidia.com`` and device IDs ``gpu0``,
``gpu1``; the plugin itself names ``k8s.device-plugin.nvidia.com``
(``cmd/nvidia-device-plugin/plugin-manager.go``), and here the IDs are the
simulated GPUs' UUIDs, so ``{v}`` is the real vendor and ``{g0}``, ``{g1}`` the
UUIDs. NVIDIA's response ID is random (the test passes ``uuid``); ours is
derived from the IDs, so ``{key}`` is computed.

NVIDIA's rows for GDS and MOFED name ``<vendor>/gds=all`` and ``<vendor>/mofed=all``,
devices of specs NVIDIA's plugin writes for those modes; this plugin does not write
them (README), so those rows answer without the mode names: listed with that answer.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from accel_plugins.backends.nvidia.container_contract import (
    AllocateSettings,
    ImexChannel,
    container_allocation,
)
from accel_plugins.backends.nvidia.resources import build_resources
from accel_plugins.plugin.device import ContainerAllocation
from tests.unit.backends.nvidia.test_nvidia_container_contract import ANNOTATION_NAMESPACE, node_of

VENDOR = "k8s.device-plugin.nvidia.com"
DEFAULT = "cdi.k8s.io/"
CUSTOM = "custom.cdi.k8s.io/"

# (id, request (GPU positions), prefix, GDS, MOFED, IMEX channels, expected annotations)
CASES: list[tuple[str, list[int], str, bool, bool, list[str], dict[str, str]]] = [
    ("empty device list has empty response", [], DEFAULT, False, False, [], {}),
    (
        "single device is added to annotations",
        [0],
        DEFAULT,
        False,
        False,
        [],
        {"cdi.k8s.io/nvidia-device-plugin_{key}": "{v}/gpu={g0}"},
    ),
    (
        "single device is added to annotations with custom prefix",
        [0],
        CUSTOM,
        False,
        False,
        [],
        {"custom.cdi.k8s.io/nvidia-device-plugin_{key}": "{v}/gpu={g0}"},
    ),
    (
        "multiple devices are added to annotations",
        [0, 1],
        DEFAULT,
        False,
        False,
        [],
        {"cdi.k8s.io/nvidia-device-plugin_{key}": "{v}/gpu={g0},{v}/gpu={g1}"},
    ),
    (
        "multiple devices are added to annotations with custom prefix",
        [0, 1],
        CUSTOM,
        False,
        False,
        [],
        {"custom.cdi.k8s.io/nvidia-device-plugin_{key}": "{v}/gpu={g0},{v}/gpu={g1}"},
    ),
    # NVIDIA: "<vendor>/mofed=all" (a spec this plugin does not write: no name).
    ("mofed devices are selected if configured", [], DEFAULT, False, True, [], {}),
    # NVIDIA: "<vendor>/gds=all".
    ("gds devices are selected if configured", [], DEFAULT, True, False, [], {}),
    # NVIDIA: "<vendor>/gpu=gpu0,<vendor>/gds=all,<vendor>/mofed=all".
    (
        "gds and mofed devices are included with device ids",
        [0],
        DEFAULT,
        True,
        True,
        [],
        {"cdi.k8s.io/nvidia-device-plugin_{key}": "{v}/gpu={g0}"},
    ),
    (
        "imex channel is included with devices",
        [],
        DEFAULT,
        False,
        False,
        ["0"],
        {"cdi.k8s.io/nvidia-device-plugin_{key}": "{v}/imex-channel=0"},
    ),
]


@pytest.mark.parametrize(
    ("request_gpus", "prefix", "gds", "mofed", "channels", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
@pytest.mark.parametrize("strategy", ["cdi-annotations", "cdi-cri"])
def test_cdi_allocate_response(
    strategy: str,
    request_gpus: list[int],
    prefix: str,
    gds: bool,
    mofed: bool,
    channels: list[str],
    expected: dict[str, str],
) -> None:
    """cdi-annotations answers NVIDIA's annotation; cdi-cri the same names as CDI devices
    (``updateResponseForCDI`` builds one list of names for both)."""
    gpus = build_resources(node_of("pcie-4gpu"), "none")["nvidia.com/gpu"]
    devices = [gpus[i] for i in request_gpus]
    settings = AllocateSettings(
        device_list_strategies=(strategy,),
        cdi_annotation_prefix=prefix,
        gds_enabled=gds,
        mofed_enabled=mofed,
        imex_channels=tuple(ImexChannel(c) for c in channels),
    )
    got = container_allocation(devices, settings)
    key = uuid.uuid5(ANNOTATION_NAMESPACE, ",".join(d.id for d in devices))
    names = {"v": VENDOR, "key": str(key), "g0": gpus[0].id, "g1": gpus[1].id}
    annotations = {k.format(**names): v.format(**names) for k, v in expected.items()}
    features = {n: "enabled" for n, on in (("NVIDIA_GDS", gds), ("NVIDIA_MOFED", mofed)) if on}
    want: dict[str, Any] = {"envs": features}
    if strategy == "cdi-annotations":
        want["annotations"] = annotations
    else:
        want["cdi_devices"] = tuple(
            name for value in annotations.values() for name in value.split(",")
        )
    assert got == ContainerAllocation(**want)
