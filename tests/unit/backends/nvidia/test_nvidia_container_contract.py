"""Allocate's answer, as NVIDIA's plugin gives it: one golden table per device-list strategy.

What the golden tables follow, in github.com/NVIDIA/k8s-device-plugin:
``internal/plugin/server.go`` (getAllocateResponse: CDI names first, then the
GDRCOPY/GDS/MOFED variables, nothing more for CDI-only strategies, then
NVIDIA_VISIBLE_DEVICES and NVIDIA_IMEX_CHANNELS for envvar, mounts for
volume-mounts, device specs; apiDeviceSpecs: the control nodes that exist, the
devices' nodes, the IMEX channel nodes; uniqueDeviceIDsFromAnnotatedDeviceIDs:
request order, replicas once), ``internal/rm/nvml_manager.go`` (the control
nodes and their order), ``internal/rm/nvml_devices.go`` (a MIG device's parent
node and capability nodes), ``internal/imex/imex.go`` (channel paths).

Every case runs on a simulated node (tests/fixtures/nvidia.py) with a fake dev
root built here: ``/dev/nvidiactl``, ``/dev/nvidia-uvm`` and
``/dev/nvidia-modeset`` exist, ``/dev/nvidia-uvm-tools`` does not, and IMEX
channel 0 is a character device. Placeholders: ``{u0}``..``{u3}`` the GPUs'
UUIDs, ``{root}`` the dev root, ``{key}`` the CDI annotation's response ID, ``{v}``
the CDI vendor.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.container_contract import (
    AllocateSettings,
    ImexChannel,
    container_allocation,
    find_imex_channels,
    generated_mig_minors,
    read_mig_minors,
)
from accel_plugins.backends.nvidia.discovery import Node, discover
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.nvml import session
from accel_plugins.backends.nvidia.resources import build_resources
from accel_plugins.backends.nvidia.sharing import replicate
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.errors import ConfigError
from accel_plugins.plugin.device import ContainerAllocation, Device, DeviceNode, Mount
from accel_plugins.testing import FakeHost
from tests.fixtures.nvidia import profile

ANNOTATION_NAMESPACE = uuid.UUID("0b7e9b4c-64a5-4d0e-9a38-4f2b7f1d9e11")
STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")


def node_of(name: str) -> Node:
    nvml = SimulatedNvml(profile(name))
    with session(nvml):
        return discover(nvml)


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    """The node's dev root: three of the four control nodes, and IMEX channel 0."""
    fake = FakeHost(tmp_path / "host")
    for minor, path in [(255, "/dev/nvidiactl"), (254, "/dev/nvidia-modeset")]:
        fake.node(path, major=195, minor=minor)
    fake.node("/dev/nvidia-uvm", major=508, minor=0)
    fake.node("/dev/nvidia-caps-imex-channels/channel0", major=509, minor=0)
    return fake


def gpus(root: Path) -> list[Device]:
    return build_resources(node_of("pcie-4gpu"), "none", dev_root=root, device_specs=True)[
        "nvidia.com/gpu"
    ]


def respond(
    devices: Sequence[Device],
    root: Path,
    strategies: Sequence[str],
    *,
    ids: str = "uuid",
    specs: bool = False,
    imex: bool = False,
    features: Sequence[str] = (),
) -> ContainerAllocation:
    settings = AllocateSettings(
        device_list_strategies=tuple(strategies),
        device_id_strategy=ids,
        pass_device_specs=specs,
        dev_root=root,
        imex_channels=(ImexChannel("0"),) if imex else (),
        gdrcopy_enabled="gdrcopy" in features,
        gds_enabled="gds" in features,
        mofed_enabled="mofed" in features,
    )
    return container_allocation(devices, settings)


def expand(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**names)
    if isinstance(value, dict):
        return {expand(k, names): expand(v, names) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [expand(v, names) for v in value]
    return value


def golden(expected: dict[str, Any], names: dict[str, str]) -> ContainerAllocation:
    e = expand(expected, names)
    return ContainerAllocation(
        nodes=tuple(DeviceNode(f"{names['root']}{p}", p, "rw") for p in e.get("nodes", [])),
        mounts=tuple(
            Mount("/dev/null", f"/var/run/nvidia-container-devices/{p}")
            for p in e.get("mounts", [])
        ),
        envs=e.get("envs", {}),
        annotations=e.get("annotations", {}),
        cdi_devices=tuple(e.get("cdi", [])),
    )


def names_for(devices: list[Device], root: Path, ids: list[str]) -> dict[str, str]:
    key = uuid.uuid5(ANNOTATION_NAMESPACE, ",".join(ids))
    return {f"u{i}": d.id for i, d in enumerate(devices)} | {
        "root": str(root),
        "key": str(key),
        "v": "k8s.device-plugin.nvidia.com",  # NVIDIA's plugin-manager.go: cdi.WithVendor
    }


# Request: GPU 3 then GPU 1 (the kubelet's order is kept). Options: ids (uuid/index),
# specs (passDeviceSpecs), imex (channel 0 configured), features (gds, mofed, gdrcopy).
Golden = list[tuple[dict[str, Any], dict[str, Any]]]
CONTROL = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-modeset"]
GPU_NODES = ["/dev/nvidia3", "/dev/nvidia1"]
FEATURES = {"NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled", "NVIDIA_GDRCOPY": "enabled"}

ENVVAR_GOLDEN: Golden = [
    ({}, {"envs": {"NVIDIA_VISIBLE_DEVICES": "{u3},{u1}"}}),
    ({"ids": "index"}, {"envs": {"NVIDIA_VISIBLE_DEVICES": "3,1"}}),
    (
        {"specs": True},
        {"envs": {"NVIDIA_VISIBLE_DEVICES": "{u3},{u1}"}, "nodes": CONTROL + GPU_NODES},
    ),
    (
        {"imex": True},
        {"envs": {"NVIDIA_VISIBLE_DEVICES": "{u3},{u1}", "NVIDIA_IMEX_CHANNELS": "0"}},
    ),
    (
        {"imex": True, "specs": True, "ids": "index"},
        {
            "envs": {"NVIDIA_VISIBLE_DEVICES": "3,1", "NVIDIA_IMEX_CHANNELS": "0"},
            "nodes": [*CONTROL, *GPU_NODES, "/dev/nvidia-caps-imex-channels/channel0"],
        },
    ),
    (
        {"features": ("gds", "mofed", "gdrcopy")},
        {"envs": {"NVIDIA_VISIBLE_DEVICES": "{u3},{u1}", **FEATURES}},
    ),
    (
        {"features": ("gds",)},
        {"envs": {"NVIDIA_VISIBLE_DEVICES": "{u3},{u1}", "NVIDIA_GDS": "enabled"}},
    ),
]
VOLUME_MOUNTS = "/var/run/nvidia-container-devices"
VOLUME_MOUNTS_GOLDEN: Golden = [
    ({}, {"envs": {"NVIDIA_VISIBLE_DEVICES": VOLUME_MOUNTS}, "mounts": ["{u3}", "{u1}"]}),
    ({"ids": "index"}, {"envs": {"NVIDIA_VISIBLE_DEVICES": VOLUME_MOUNTS}, "mounts": ["3", "1"]}),
    (
        {"specs": True},
        {
            "envs": {"NVIDIA_VISIBLE_DEVICES": VOLUME_MOUNTS},
            "mounts": ["{u3}", "{u1}"],
            "nodes": CONTROL + GPU_NODES,
        },
    ),
    (
        {"imex": True},
        {"envs": {"NVIDIA_VISIBLE_DEVICES": VOLUME_MOUNTS}, "mounts": ["{u3}", "{u1}", "imex/0"]},
    ),
    (
        {"features": ("gds", "mofed", "gdrcopy")},
        {"envs": {"NVIDIA_VISIBLE_DEVICES": VOLUME_MOUNTS, **FEATURES}, "mounts": ["{u3}", "{u1}"]},
    ),
]
ANNOTATION = "cdi.k8s.io/nvidia-device-plugin_{key}"
CDI_ANNOTATIONS_GOLDEN: Golden = [
    (
        {},
        {"annotations": {ANNOTATION: "{v}/gpu={u3},{v}/gpu={u1}"}},
    ),
    (
        {"ids": "index"},
        {"annotations": {ANNOTATION: "{v}/gpu=3,{v}/gpu=1"}},
    ),
    # CDI strategies alone: no device specs, as NVIDIA returns before them.
    (
        {"specs": True},
        {"annotations": {ANNOTATION: "{v}/gpu={u3},{v}/gpu={u1}"}},
    ),
    (
        {"imex": True},
        {"annotations": {ANNOTATION: "{v}/gpu={u3},{v}/gpu={u1},{v}/imex-channel=0"}},
    ),
    (
        {"features": ("gds", "mofed", "gdrcopy")},
        {
            "annotations": {ANNOTATION: "{v}/gpu={u3},{v}/gpu={u1}"},
            "envs": FEATURES,
        },
    ),
]
CDI_CRI_GOLDEN: Golden = [
    (
        {},
        {"cdi": ["{v}/gpu={u3}", "{v}/gpu={u1}"]},
    ),
    (
        {"ids": "index"},
        {"cdi": ["{v}/gpu=3", "{v}/gpu=1"]},
    ),
    (
        {"specs": True},
        {"cdi": ["{v}/gpu={u3}", "{v}/gpu={u1}"]},
    ),
    (
        {"imex": True, "specs": True},
        {
            "cdi": [
                "{v}/gpu={u3}",
                "{v}/gpu={u1}",
                "{v}/imex-channel=0",
            ]
        },
    ),
    (
        {"features": ("gds", "mofed", "gdrcopy")},
        {
            "cdi": [
                "{v}/gpu={u3}",
                "{v}/gpu={u1}",
            ],
            "envs": FEATURES,
        },
    ),
]


def _cases(strategy: str, table: Golden) -> list[Any]:
    def name(options: dict[str, Any]) -> str:
        parts = [f"{k}={'+'.join(v) if isinstance(v, tuple) else v}" for k, v in options.items()]
        return "-".join([strategy, *parts]) or strategy

    return [
        pytest.param(strategy, options, expected, id=name(options)) for options, expected in table
    ]


@pytest.mark.parametrize(
    ("strategy", "options", "expected"),
    _cases("envvar", ENVVAR_GOLDEN)
    + _cases("volume-mounts", VOLUME_MOUNTS_GOLDEN)
    + _cases("cdi-annotations", CDI_ANNOTATIONS_GOLDEN)
    + _cases("cdi-cri", CDI_CRI_GOLDEN),
)
def test_golden_per_strategy(
    host: FakeHost, strategy: str, options: dict[str, Any], expected: dict[str, Any]
) -> None:
    devices = gpus(host.root)
    got = respond([devices[3], devices[1]], host.root, [strategy], **options)
    ids = ["3", "1"] if options.get("ids") == "index" else [devices[3].id, devices[1].id]
    assert got == golden(expected, names_for(devices, host.root, ids))


@pytest.mark.parametrize(
    "strategies",
    [
        pytest.param(c, id="+".join(c))
        for n in range(2, 5)
        for c in itertools.combinations(STRATEGIES, n)
    ],
)
@pytest.mark.parametrize("specs", [False, True], ids=["specs-off", "specs-on"])
def test_combined_strategies_are_each_strategys_part(
    host: FakeHost, strategies: tuple[str, ...], specs: bool
) -> None:
    """A combination answers the union of its strategies' goldens; volume-mounts' value of
    NVIDIA_VISIBLE_DEVICES wins over envvar's, and device specs come only without a CDI
    strategy: a device named by CDI is injected by its spec, once (NVIDIA passes both)."""
    devices = gpus(host.root)
    pair = [devices[3], devices[1]]
    got = respond(pair, host.root, strategies, specs=specs, imex=True)
    parts = [respond(pair, host.root, [s], specs=specs, imex=True) for s in strategies]
    envs: dict[str, str] = {}
    for part in parts:
        envs |= part.envs
    assert dict(got.envs) == envs
    assert got.mounts == sum((p.mounts for p in parts), ())
    assert dict(got.annotations) == {k: v for p in parts for k, v in p.annotations.items()}
    assert got.cdi_devices == sum((p.cdi_devices for p in parts), ())
    cdi = any(s.startswith("cdi-") for s in strategies)
    assert got.nodes == (() if cdi else next((p.nodes for p in parts if p.nodes), ()))


def test_no_strategy_gets_only_the_feature_variables(host: FakeHost) -> None:
    """An empty deviceListStrategy list: NVIDIA treats it as all-CDI with no CDI name."""
    devices = gpus(host.root)
    got = respond(devices[:1], host.root, [], specs=True, features=("gds",))
    assert got == ContainerAllocation(envs={"NVIDIA_GDS": "enabled"})


def test_replicas_of_one_gpu_are_named_once_in_request_order(host: FakeHost) -> None:
    devices = gpus(host.root)
    replicas = replicate(devices[2], 4)
    assert [r.id for r in replicas] == [f"{devices[2].id}::{n}" for n in range(4)]
    request = [replicas[3], devices[0], replicas[1]]
    got = respond(request, host.root, ["envvar", "volume-mounts"], specs=True)
    assert dict(got.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [m.container_path.rsplit("/", 1)[1] for m in got.mounts] == [
        devices[2].id,
        devices[0].id,
    ]
    assert [n.container_path for n in got.nodes] == [*CONTROL, "/dev/nvidia2", "/dev/nvidia0"]
    got = respond(request, host.root, ["envvar", "cdi-cri"], specs=True)
    assert dict(got.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{devices[2].id},{devices[0].id}"}
    assert got.cdi_devices == (
        f"k8s.device-plugin.nvidia.com/gpu={devices[2].id}",
        f"k8s.device-plugin.nvidia.com/gpu={devices[0].id}",
    )
    assert got.nodes == ()  # injected by the CDI spec, not a second time as device specs


def test_mig_devices_parent_nodes_then_capabilities(host: FakeHost) -> None:
    minors = generated_mig_minors(4)
    migs = build_resources(
        node_of("a100-mig"), "mixed", dev_root=host.root, device_specs=True, mig_minors=minors
    )["nvidia.com/mig-1g.5gb"]
    request = [migs[2], migs[0], migs[1]]  # GPU 1's, then two of GPU 0's
    got = respond(request, host.root, ["envvar"], ids="index", specs=True)
    assert dict(got.envs) == {"NVIDIA_VISIBLE_DEVICES": "1:0,0:2,0:3"}
    facts = [gpu_facts(m) for m in request]
    caps = [
        f"/dev/nvidia-caps/nvidia-cap{minors[key]}"
        for f in facts
        for key in (
            f"gpu{f.gpu_index}/gi{f.gpu_instance}/access",
            f"gpu{f.gpu_index}/gi{f.gpu_instance}/ci{f.compute_instance}/access",
        )
    ]
    assert [n.container_path for n in got.nodes] == [
        *CONTROL,
        "/dev/nvidia1",
        "/dev/nvidia0",
        *caps,
    ]
    assert all(n.host_path == f"{host.root}{n.container_path}" for n in got.nodes)


def test_driver_container_dev_root_prefixes_every_host_path(tmp_path: Path) -> None:
    """With nvidiaDevRoot /run/nvidia/driver the host paths carry it (none exist here, so the
    optional control nodes are left out and the GPU nodes stay)."""
    root = Path("/run/nvidia/driver")
    devices = gpus(root)
    got = respond([devices[1]], root, ["envvar"], specs=True)
    assert got.nodes == (DeviceNode("/run/nvidia/driver/dev/nvidia1", "/dev/nvidia1", "rw"),)


def test_custom_cdi_annotation_prefix(host: FakeHost) -> None:
    settings = AllocateSettings(
        device_list_strategies=("cdi-annotations",), cdi_annotation_prefix="cdi.example.com/"
    )
    [key] = container_allocation(gpus(host.root)[:1], settings).annotations
    assert key.startswith("cdi.example.com/nvidia-device-plugin_")
    assert len(key.split("/", 1)[1]) <= 63  # the annotation name limit


# -- IMEX channels at start (internal/imex/imex.go GetChannels) --------------------------


def test_imex_channel_found_under_the_dev_root(host: FakeHost) -> None:
    assert find_imex_channels([0], host.root, required=True) == (ImexChannel("0"),)
    assert find_imex_channels([], host.root, required=True) == ()


def test_a_missing_optional_imex_channel_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert find_imex_channels([0], tmp_path, required=False) == ()
    assert "ignoring requested IMEX channel channel0" in caplog.text


def test_a_missing_required_imex_channel_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        find_imex_channels([0], tmp_path, required=True, source=("f.yaml", "imex.channelIDs"))
    assert (caught.value.source, caught.value.field) == ("f.yaml", "imex.channelIDs")
    assert "channel0 does not exist" in caught.value.reason


def test_an_imex_channel_that_is_not_a_character_device_does_not_count(host: FakeHost) -> None:
    host.remove("/dev/nvidia-caps-imex-channels/channel0")
    host.regular_file("/dev/nvidia-caps-imex-channels/channel0")
    assert find_imex_channels([0], host.root, required=False) == ()


def test_mig_minors_file_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "mig-minors"
    path.write_text("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\nbad\n")
    assert read_mig_minors(path) == {
        "config": 1,
        "monitor": 2,
        "gpu0/gi1/access": 12,
        "gpu0/gi1/ci0/access": 13,
    }
    assert read_mig_minors(tmp_path / "absent") == {}


def _listed_mig_minors(gpus: int, gpu_instances: int = 15, compute: int = 8) -> dict[str, int]:
    """The table as the driver's file lists it: config, monitor, then per GPU, per GPU
    instance its access minor followed by its compute instances'."""
    table = {"config": 1, "monitor": 2}
    for gpu in range(gpus):
        for gi in range(gpu_instances):
            table[f"gpu{gpu}/gi{gi}/access"] = len(table) + 1
            for ci in range(compute):
                table[f"gpu{gpu}/gi{gi}/ci{ci}/access"] = len(table) + 1
    return table


@pytest.mark.parametrize("gpus", [0, 1, 4, 8])
def test_simulated_mig_minors_are_the_listed_table_without_holding_it(gpus: int) -> None:
    minors = generated_mig_minors(gpus)
    listed = _listed_mig_minors(gpus)
    assert dict(minors) == listed
    assert len(minors) == len(listed)
    assert all(minors[key] == minor for key, minor in listed.items())


@pytest.mark.parametrize(
    "key",
    [
        "gpu8/gi0/access",  # past the last GPU
        "gpu0/gi15/access",  # past the last GPU instance
        "gpu0/gi0/ci8/access",  # past the last compute instance
        "gpux/gi0/access",
        "gi0/gpu0/access",
        "gpu0/gi0",
        "gpu0/gi0/ci0/access/extra",
        "gpu-1/gi0/access",
        "",
    ],
)
def test_simulated_mig_minors_know_no_other_key(key: str) -> None:
    minors = generated_mig_minors(8)
    assert key not in minors
    with pytest.raises(KeyError):
        minors[key]
