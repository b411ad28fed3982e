"""Random configuration files: a ConfigError naming the file (and field), never a traceback.

The three file formats (generic config, NVIDIA config v1, simulated node
profile) are fed bytes, random YAML and near-valid documents in process for
breadth; what parses must also build a backend or fail with the project's own
errors. A few real ``accel-plugins`` runs check the operator's contract: exit
code 2, the file and field on stderr, no traceback.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from accel_plugins.backends.generic.config import OUTSIDE_DEV_KEY, load_config
from accel_plugins.backends.nvidia.backend import create_backend
from accel_plugins.backends.nvidia.config.config import (
    FileConfig,
    NvidiaSettings,
    Overrides,
    resolve,
)
from accel_plugins.backends.nvidia.config.config import load_config_file as load_nvidia_config
from accel_plugins.backends.nvidia.container_contract import generated_mig_minors
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.backends.nvidia.simulate.simulated_profile import load_profile_file
from accel_plugins.errors import AccelPluginsError, ConfigError
from tests.reliability.config_fuzz_support import documents
from tests.support.cli import run_cli

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

GENERIC_BASE: dict[str, Any] = {
    "devices": [
        {
            "name": "serial",
            "groups": [
                {
                    "paths": [
                        {"path": "/dev/ttyUSB*", "mountPath": "/dev/", "permissions": "rw"},
                        {"path": "/srv/fw", "type": "Mount", "readOnly": True, "optional": True},
                    ],
                    "count": 2,
                },
                {"usb": [{"vendor": "1a86", "product": "7523", "serial": "A9"}]},
                {
                    "udev": [
                        {
                            "subsystem": "sound",
                            "kernel": "pcmC*",
                            "properties": {"ID_MODEL": "USB*"},
                            "attributes": {"idVendor": "0d8c"},
                            "mountPath": "/dev/snd/",
                        }
                    ]
                },
            ],
        }
    ]
}
GENERIC_KEYS = [
    "devices", "name", "groups", "paths", "usb", "udev", "count", "path", "mountPath",
    "permissions", "readOnly", "type", "limit", "optional", OUTSIDE_DEV_KEY, "vendor",
    "product", "serial", "subsystem", "kernel", "properties", "attributes",
]  # fmt: skip

NVIDIA_BASE: dict[str, Any] = {
    "version": "v1",
    "flags": {
        "migStrategy": "mixed",
        "failOnInitError": True,
        "nvidiaDriverRoot": "/",
        "plugin": {
            "passDeviceSpecs": False,
            "deviceListStrategy": ["envvar", "cdi-annotations"],
            "deviceIDStrategy": "uuid",
        },
    },
    "sharing": {
        "timeSlicing": {
            "renameByDefault": False,
            "failRequestsGreaterThanOne": True,
            "resources": [
                {"name": "nvidia.com/gpu", "replicas": 2, "devices": [3]},
                {"name": "mig-1g.5gb", "replicas": 3, "devices": "all"},
            ],
        }
    },
}
NVIDIA_KEYS = [
    "version", "flags", "sharing", "migStrategy", "failOnInitError", "nvidiaDriverRoot",
    "plugin", "passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy",
    "cdiAnnotationPrefix", "timeSlicing", "mps", "renameByDefault",
    "failRequestsGreaterThanOne", "resources", "name", "rename", "devices", "replicas",
]  # fmt: skip

PROFILE_BASE: dict[str, Any] = {
    "gpus": [
        {"name": "A", "memoryMiB": 40960, "numaNode": 0, "mig": ["1g.5gb", "3g.20gb"]},
        {"name": "B", "memoryMiB": 1024, "numaNode": 1, "pciBusId": "0000:0f:00.0"},
    ],
    "nvswitch": False,
    "topology": [["X", "NV4"], ["NV4", "X"]],
    "events": [
        {"at": 0, "gpu": 0, "xid": 79, "mig": 1},
        {"at": 1, "gpu": 1, "lost": True},
        {"at": 2, "gpu": 1, "restore": True},
    ],
}
PROFILE_KEYS = [
    "gpus", "topology", "nvswitch", "events", "name", "memoryMiB", "numaNode", "uuid",
    "pciBusId", "mig", "at", "gpu", "xid", "lost", "restore",
]  # fmt: skip

# A node with plain GPUs and MIG devices, so sharing entries of both kinds can match.
MIG_NODE = load_profile("a100-mig")


@pytest.fixture(scope="module")
def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="fuzz-"))


def write(scratch: Path, content: bytes) -> Path:
    path = scratch / "fuzz.yaml"
    path.write_bytes(content)
    return path


def expect_config_error(load: Callable[[Path], object], path: Path) -> object | None:
    """Parse; a failure must be a ConfigError that starts with the file name."""
    error: ConfigError | None = None
    try:
        return load(path)
    except ConfigError as exc:
        error = exc
    assert error.source == str(path)
    assert str(error).startswith(f"{path}: ")
    assert error.reason
    return None


def build_nvidia(node: Any, settings: NvidiaSettings) -> None:
    """What the CLI does next with a parsed file; only project errors may come out."""
    with contextlib.suppress(AccelPluginsError):
        create_backend(
            SimulatedNvml(node), settings, mig_minors=generated_mig_minors(len(node.gpus))
        )


@FUZZ
@given(content=documents(GENERIC_BASE, GENERIC_KEYS))
def test_generic_config(scratch: Path, content: bytes) -> None:
    expect_config_error(load_config, write(scratch, content))


@FUZZ
@given(content=documents(NVIDIA_BASE, NVIDIA_KEYS))
def test_nvidia_config(scratch: Path, content: bytes) -> None:
    file = expect_config_error(load_nvidia_config, write(scratch, content))
    if isinstance(file, FileConfig):
        try:
            chosen = resolve(Overrides(), file)
        except ConfigError:
            return
        build_nvidia(MIG_NODE, chosen)


@FUZZ
@given(content=documents(PROFILE_BASE, PROFILE_KEYS))
def test_simulate_profile(scratch: Path, content: bytes) -> None:
    node = expect_config_error(load_profile_file, write(scratch, content))
    if node is not None:
        for strategy in ("none", "single", "mixed"):
            build_nvidia(node, NvidiaSettings(mig_strategy=strategy))


# -- inputs that broke parsers once, kept as a table ----------------------------------

NASTY = [
    pytest.param(b"? [a]\n: b\n", id="list-as-key"),
    pytest.param(b"? {a: 1}\n: b\n", id="mapping-as-key"),
    pytest.param(b"\xff\xfe\x00", id="not-utf8"),
    pytest.param("version: v\xe91\n".encode("latin-1"), id="latin-1"),
    pytest.param(b"[" * 5000 + b"]" * 5000, id="deep-list"),
    pytest.param(b"{a: " * 3000 + b"1" + b"}" * 3000, id="deep-mapping"),
    pytest.param(b"&a [*a]\n", id="self-referencing-list"),
    pytest.param(b"devices: &x [{name: a, groups: *x}]\n", id="self-referencing-devices"),
    pytest.param(b"gpus: &x [{name: a, memoryMiB: 1, mig: *x}]\n", id="self-referencing-gpus"),
    pytest.param(b"!!python/object/apply:os.system [true]\n", id="python-tag"),
    pytest.param(b"a: 1\n---\nb: 2\n", id="two-documents"),
    pytest.param(b"a: 1\na: 2\n", id="duplicate-key"),
    pytest.param(b"", id="empty"),
]
LOADERS = [
    pytest.param(load_config, id="generic"),
    pytest.param(load_nvidia_config, id="nvidia"),
    pytest.param(load_profile_file, id="profile"),
]


@pytest.mark.parametrize("content", NASTY)
@pytest.mark.parametrize("load", LOADERS)
def test_nasty_inputs(tmp_path: Path, load: Callable[[Path], object], content: bytes) -> None:
    expect_config_error(load, write(tmp_path, content))


ABSURD_SIZES = [
    pytest.param(
        load_config,
        b"devices: [{name: s, groups: [{count: 1000000000, paths: [{path: /dev/a}]}]}]\n",
        "devices[0].groups[0].count",
        id="generic-count",
    ),
    pytest.param(
        load_config,
        b"devices: [{name: s, groups: [{paths: [{path: /dev/a, limit: 1000000000}]}]}]\n",
        "devices[0].groups[0].paths[0].limit",
        id="generic-limit",
    ),
    pytest.param(
        load_nvidia_config,
        b"sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1000000000}]}}\n",
        "sharing.timeSlicing.resources[0].replicas",
        id="nvidia-replicas",
    ),
]


@pytest.mark.parametrize(("load", "content", "field"), ABSURD_SIZES)
def test_absurd_sizes_are_refused_before_anything_is_built(
    tmp_path: Path, load: Callable[[Path], object], content: bytes, field: str
) -> None:
    with pytest.raises(ConfigError, match="at most 10000") as caught:
        load(write(tmp_path, content))
    assert caught.value.field == field


def test_a_large_simulated_node_gets_distinct_valid_bus_ids(tmp_path: Path) -> None:
    gpus = "".join("  - {name: G, memoryMiB: 1024}\n" for _ in range(64))
    node = load_profile_file(write(tmp_path, f"gpus:\n{gpus}".encode()))
    assert len({gpu.pci_bus_id for gpu in node.gpus}) == 64


# -- the command line ------------------------------------------------------------------


CLI_CASES = [
    pytest.param(
        ["generic", "--config"],
        b"devices:\n  - name: serial\n    groups: [{paths: [{path: /dev/a, limit: -1}]}]\n",
        "devices[0].groups[0].paths[0].limit",
        id="generic-field",
    ),
    pytest.param(["generic", "--config"], b"\xff\xfe", "not UTF-8", id="generic-bytes"),
    pytest.param(
        ["nvidia", "--simulate", "pcie-4gpu", "--config"],
        b"version: v1\nflags: {plugin: {deviceIDStrategy: serial}}\n",
        "flags.plugin.deviceIDStrategy",
        id="nvidia-field",
    ),
    pytest.param(
        ["nvidia", "--simulate", "pcie-4gpu", "--config"],
        b"[" * 5000,
        "not valid YAML",
        id="nvidia-deep",
    ),
    pytest.param(
        ["nvidia", "--simulate"],
        b"gpus: [{name: A, memoryMiB: 0}]\n",
        "gpus[0].memoryMiB",
        id="profile-field",
    ),
    pytest.param(["nvidia", "--simulate"], b"\xff", "not UTF-8", id="profile-bytes"),
]


@pytest.mark.parametrize(("argv", "content", "field"), CLI_CASES)
def test_cli_exits_2_naming_file_and_field(
    tmp_path: Path, argv: list[str], content: bytes, field: str
) -> None:
    path = write(tmp_path, content)
    result = run_cli(*argv, str(path), "--plugin-dir", str(tmp_path / "plugins"))
    assert result.returncode == 2, result.stderr
    assert str(path) in result.stderr
    assert field in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "plugins").exists()  # stopped before touching the kubelet
