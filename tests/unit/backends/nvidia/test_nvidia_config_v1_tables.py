"""NVIDIA's own config v1 tests and documented examples, transcribed: each fragment is
placed at its path in a config file, loaded, and accepted or refused as NVIDIA's plugin
does, with the values checked.

Sources, all in github.com/NVIDIA/k8s-device-plugin (the case names say which):

- ``api/config/v1/flags_test.go``: TestUnmarshalFlags, TestMarshalFlags (what NVIDIA
  prints loads back).
- ``api/config/v1/replicas_test.go``: TestReplicatedDeviceRef,
  TestMarshalReplicatedDevices, TestUnmarshalReplicatedDevices,
  TestUnmarshalReplicatedResource, TestUnmarshalReplicatedResources.
- ``api/config/v1/imex_test.go``: TestImexUnmarshal (with AssertChannelIDsValid).
- ``api/config/v1/config_test.go``: the MPS failRequestsGreaterThanOne default.
- ``api/config/v1/resources_test.go``: TestResourcePatternMatches.
- ``README.md``: the config file examples; ``deployments/helm/nvidia-device-plugin/values.yaml``:
  the ``config.map`` example; ``cmd/nvidia-device-plugin/main.go``: the config it prints.

NVIDIA's unit tests feed raw JSON to one type's decoder; its plugin reads a YAML file
through sigs.k8s.io/yaml. Where that path gives a different verdict for the same
fragment, the case says why (``file_level``) and expects what the plugin does.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.config.config import (
    FileConfig,
    GfdFlags,
    Imex,
    NvidiaSettings,
    Overrides,
    ReplicaDevices,
    ResourcePattern,
    load_config_file,
    resolve,
)
from accel_plugins.backends.nvidia.config.config_syntax import (
    is_gpu_uuid,
    is_mig_index,
    is_mig_uuid,
    is_uint,
)
from accel_plugins.errors import ConfigError

GPU_UUID = "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"


def load(tmp_path: Path, text: str) -> FileConfig:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return load_config_file(path)


def settle(tmp_path: Path, text: str, overrides: Overrides | None = None) -> NvidiaSettings:
    """Load and merge as the plugin does at start (NVIDIA's NewConfig + validateFlags)."""
    return resolve(overrides or Overrides(), load(tmp_path, text))


def refused(tmp_path: Path, text: str, field: str, overrides: Overrides | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        settle(tmp_path, text, overrides)
    assert caught.value.source == str(tmp_path / "config.yaml")
    assert caught.value.field == field
    return caught.value.reason


# -- flags_test.go ---------------------------------------------------------------------


@dataclass(frozen=True)
class FlagsCase:
    fragment: str
    gfd: GfdFlags | None = None
    strategies: tuple[str, ...] | None = None
    file_level: str = ""


FLAGS_CASES = [
    pytest.param(
        FlagsCase(
            "",
            file_level="Go's decoder refuses no JSON at all; in a file, `flags:` with nothing "
            "is null, which leaves every flag unset",
        ),
        id="TestUnmarshalFlags-0-empty",
    ),
    pytest.param(FlagsCase("{}"), id="TestUnmarshalFlags-1-{}"),
    pytest.param(FlagsCase('{"gfd": {}}', gfd=GfdFlags()), id="TestUnmarshalFlags-2-gfd"),
    *(
        pytest.param(
            FlagsCase(f'{{"gfd": {{"sleepInterval": {value}}}}}', gfd=GfdFlags(sleep_interval=s)),
            id=f"TestUnmarshalFlags-{n}-sleepInterval-{value}",
        )
        for n, value, s in [
            (3, "0", 0.0),
            (4, '"0s"', 0.0),
            (5, "5", 5e-9),
            (6, '"5s"', 5.0),
            (7, '"infinite"', math.inf),
        ]
    ),
    pytest.param(
        FlagsCase('{"plugin": {"deviceListStrategy": "envvar"}}', strategies=("envvar",)),
        id="TestUnmarshalFlags-8-one-strategy",
    ),
    pytest.param(
        FlagsCase(
            '{"plugin": {"deviceListStrategy": ["envvar", "cdi-annotations"]}}',
            strategies=("envvar", "cdi-annotations"),
        ),
        id="TestUnmarshalFlags-9-strategy-list",
    ),
]

# TestMarshalFlags: the JSON NVIDIA writes for Flags; each must load back unchanged.
_PRINTED_NULLS = (
    '"migStrategy": null, "failOnInitError": null, "gdrcopyEnabled": null, '
    '"gdsEnabled": null, "mofedEnabled": null, "useNodeFeatureAPI": null, '
    '"deviceDiscoveryStrategy": null'
)
_PRINTED_GFD = (
    '"gfd": {{"oneshot": null, "noTimestamp": null, "outputFile": null, '
    '"sleepInterval": "{}", "machineTypeFile": null}}'
)
MARSHALLED_FLAGS = [
    pytest.param(FlagsCase(f"{{{_PRINTED_NULLS}}}"), id="TestMarshalFlags-0"),
    *(
        pytest.param(
            FlagsCase(
                f"{{{_PRINTED_NULLS}, {_PRINTED_GFD.format(text)}}}",
                gfd=GfdFlags(sleep_interval=seconds),
            ),
            id=f"TestMarshalFlags-{n}-{text}",
        )
        for n, text, seconds in [(1, "0s", 0.0), (2, "5ns", 5e-9), (3, "infinite", math.inf)]
    ),
]


@pytest.mark.parametrize("case", FLAGS_CASES + MARSHALLED_FLAGS)
def test_flags_fragments(tmp_path: Path, case: FlagsCase) -> None:
    config = load(tmp_path, f"version: v1\nflags: {case.fragment}\n")
    assert config.gfd == case.gfd
    assert config.device_list_strategy == case.strategies
    unset = (
        config.mig_strategy,
        config.fail_on_init_error,
        config.gdrcopy_enabled,
        config.gds_enabled,
        config.mofed_enabled,
        config.use_node_feature_api,
        config.device_discovery_strategy,
    )
    assert unset == (None,) * len(unset)
    assert config.ignored == ()


# -- replicas_test.go ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "kind"),
    [
        pytest.param("0", "gpuIndex", id="TestReplicatedDeviceRef-0"),
        pytest.param("0:0", "migIndex", id="TestReplicatedDeviceRef-1"),
        pytest.param(GPU_UUID, "uuid", id="TestReplicatedDeviceRef-2"),
        pytest.param(
            "MIG-3eb87630-93d5-b2b6-b8ff-9b359caf4ee2", "uuid", id="TestReplicatedDeviceRef-3"
        ),
        pytest.param(
            "MIG-GPU-662077db-fa3f-0d8f-9502-21ab0ef058a2/10/0",
            "uuid",
            id="TestReplicatedDeviceRef-4",
        ),
    ],
)
def test_replicated_device_ref(tmp_path: Path, ref: str, kind: str) -> None:
    assert is_uint(ref) == (kind == "gpuIndex")
    assert is_mig_index(ref) == (kind == "migIndex")
    assert (is_gpu_uuid(ref) or is_mig_uuid(ref)) == (kind == "uuid")
    config = load(tmp_path, entry_with_devices(f"['{ref}']"))
    assert config.time_slicing.resources[0].devices == ReplicaDevices(refs=(ref,))


def entry_with_devices(devices: str) -> str:
    entry = f"{{name: gpu, replicas: 2, devices: {devices}}}"
    return f"sharing:\n  timeSlicing:\n    resources:\n    - {entry}\n"


DEVICES_OK = [
    # TestMarshalReplicatedDevices: what NVIDIA writes for ReplicatedDevices loads back.
    pytest.param('"all"', ReplicaDevices(all=True), "", id="TestMarshalReplicatedDevices-1-all"),
    pytest.param("2", ReplicaDevices(count=2), "", id="TestMarshalReplicatedDevices-2-count"),
    pytest.param(
        f'["0", "0:0", "{GPU_UUID}"]',
        ReplicaDevices(refs=("0", "0:0", GPU_UUID)),
        "",
        id="TestMarshalReplicatedDevices-3-list",
    ),
    # TestUnmarshalReplicatedDevices, the accepted inputs.
    pytest.param('"all"', ReplicaDevices(all=True), "", id="TestUnmarshalReplicatedDevices-10"),
    pytest.param("2", ReplicaDevices(count=2), "", id="TestUnmarshalReplicatedDevices-11"),
    pytest.param("[0]", ReplicaDevices(refs=("0",)), "", id="TestUnmarshalReplicatedDevices-12"),
    pytest.param('["0"]', ReplicaDevices(refs=("0",)), "", id="TestUnmarshalReplicatedDevices-13"),
    pytest.param(
        '["0:0"]', ReplicaDevices(refs=("0:0",)), "", id="TestUnmarshalReplicatedDevices-14"
    ),
    pytest.param(
        f'["{GPU_UUID}"]',
        ReplicaDevices(refs=(GPU_UUID,)),
        "",
        id="TestUnmarshalReplicatedDevices-15",
    ),
    pytest.param(
        '["MIG-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"]',
        ReplicaDevices(refs=("MIG-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",)),
        "",
        id="TestUnmarshalReplicatedDevices-16",
    ),
    pytest.param(
        f'["MIG-{GPU_UUID}/0/0"]',
        ReplicaDevices(refs=(f"MIG-{GPU_UUID}/0/0",)),
        "",
        id="TestUnmarshalReplicatedDevices-17",
    ),
    pytest.param(
        f'[0, "0:0", "{GPU_UUID}"]',
        ReplicaDevices(refs=("0", "0:0", GPU_UUID)),
        "",
        id="TestUnmarshalReplicatedDevices-18",
    ),
    pytest.param(
        f'["0", "0:0", "{GPU_UUID}"]',
        ReplicaDevices(refs=("0", "0:0", GPU_UUID)),
        "",
        id="TestUnmarshalReplicatedDevices-19",
    ),
    pytest.param(
        "2.0",
        ReplicaDevices(count=2),
        "the Go test feeds the JSON text 2.0 to an int and fails; from a file, "
        "sigs.k8s.io/yaml turns YAML's 2.0 into the JSON number 2, which NVIDIA's plugin takes",
        id="TestUnmarshalReplicatedDevices-3-2.0-from-a-file",
    ),
]


@pytest.mark.parametrize(("devices", "expected", "file_level"), DEVICES_OK)
def test_devices_accepted(
    tmp_path: Path, devices: str, expected: ReplicaDevices, file_level: str
) -> None:
    config = load(tmp_path, entry_with_devices(devices))
    assert config.time_slicing.resources[0].devices == expected


@pytest.mark.parametrize(
    "devices",
    [
        pytest.param("", id="TestUnmarshalReplicatedDevices-0-empty-is-null"),
        pytest.param('"not-all"', id="TestUnmarshalReplicatedDevices-1"),
        pytest.param("-2", id="TestUnmarshalReplicatedDevices-2"),
        pytest.param("[-1]", id="TestUnmarshalReplicatedDevices-4"),
        pytest.param('["-1"]', id="TestUnmarshalReplicatedDevices-5"),
        pytest.param('["invalid-UUID"]', id="TestUnmarshalReplicatedDevices-6"),
        pytest.param('["GPU-UUID"]', id="TestUnmarshalReplicatedDevices-7"),
        pytest.param('["MIG-UUID"]', id="TestUnmarshalReplicatedDevices-8"),
        pytest.param(f'["MIG-{GPU_UUID}"]', id="TestUnmarshalReplicatedDevices-9"),
        pytest.param("2.5", id="a-fraction-is-no-count"),
    ],
)
def test_devices_refused(tmp_path: Path, devices: str) -> None:
    reason = refused(
        tmp_path,
        entry_with_devices(devices),
        "sharing.timeSlicing.resources[0].devices" + ("[0]" if devices.startswith("[") else ""),
    )
    assert reason


def one_resource(entry: str) -> str:
    return f"sharing:\n  timeSlicing:\n    resources:\n    - {entry}\n"


@pytest.mark.parametrize(
    ("entry", "name", "rename", "replicas"),
    [
        pytest.param(
            '{"name": "valid", "devices": "all", "replicas": 2}',
            "nvidia.com/valid",
            "nvidia.com/valid",
            2,
            id="TestUnmarshalReplicatedResource-5",
        ),
        pytest.param(
            '{"name": "valid", "devices": "all", "replicas": 2, "rename": "valid-shared"}',
            "nvidia.com/valid",
            "nvidia.com/valid-shared",
            2,
            id="TestUnmarshalReplicatedResource-6",
        ),
        pytest.param(
            '{"name": "valid", "replicas": 2}',
            "nvidia.com/valid",
            "nvidia.com/valid",
            2,
            id="TestUnmarshalReplicatedResource-9",
        ),
        pytest.param(
            '{"name": "valid", "replicas": 2, "rename": "valid-shared"}',
            "nvidia.com/valid",
            "nvidia.com/valid-shared",
            2,
            id="TestUnmarshalReplicatedResource-10",
        ),
    ],
)
def test_replicated_resource_accepted(
    tmp_path: Path, entry: str, name: str, rename: str, replicas: int
) -> None:
    [resource] = load(tmp_path, one_resource(entry)).time_slicing.resources
    assert (resource.name, resource.rename, resource.replicas) == (name, rename, replicas)
    assert resource.devices == ReplicaDevices(all=True)


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        pytest.param("", "", id="TestUnmarshalReplicatedResource-0-empty-is-null"),
        pytest.param("{}", "name", id="TestUnmarshalReplicatedResource-1"),
        pytest.param('{"name": "valid",}', "replicas", id="TestUnmarshalReplicatedResource-2"),
        pytest.param(
            '{"name": "valid", "devices": "all",}',
            "replicas",
            id="TestUnmarshalReplicatedResource-3",
        ),
        pytest.param(
            '{"name": "valid", "devices": "all", "rename": "valid-shared",}',
            "replicas",
            id="TestUnmarshalReplicatedResource-4",
        ),
        pytest.param(
            '{"name": "valid", "replicas": -1,}', "replicas", id="TestUnmarshalReplicatedResource-7"
        ),
        pytest.param(
            '{"name": "valid", "replicas": 0,}', "replicas", id="TestUnmarshalReplicatedResource-8"
        ),
        pytest.param(
            '{"name": "$invalid$", "replicas": 2, "rename": "valid-shared"}',
            "name",
            id="TestUnmarshalReplicatedResource-11",
        ),
        pytest.param(
            '{"name": "valid", "replicas": 2, "rename": "$invalid$"}',
            "rename",
            id="TestUnmarshalReplicatedResource-12",
        ),
        pytest.param('{"name": "valid", "replicas": 1}', "replicas", id="replicas-below-2"),
    ],
)
def test_replicated_resource_refused(tmp_path: Path, entry: str, field: str) -> None:
    where = "sharing.timeSlicing.resources[0]"
    refused(tmp_path, one_resource(entry), f"{where}.{field}" if field else where)


@pytest.mark.parametrize(
    ("section", "names"),
    [
        pytest.param(
            '{"resources": [{"name": "valid", "replicas": 2}]}',
            ["nvidia.com/valid"],
            id="TestUnmarshalReplicatedResources-3",
        ),
        pytest.param(
            '{"resources": [{"name": "valid1", "replicas": 2}, {"name": "valid2", "replicas": 2}]}',
            ["nvidia.com/valid1", "nvidia.com/valid2"],
            id="TestUnmarshalReplicatedResources-4",
        ),
    ],
)
@pytest.mark.parametrize("kind", ["timeSlicing", "mps"])
def test_replicated_resources_accepted(
    tmp_path: Path, section: str, names: list[str], kind: str
) -> None:
    config = load(tmp_path, f"sharing: {{{kind}: {section}}}\n")
    sharing = config.time_slicing if kind == "timeSlicing" else config.mps
    assert sharing is not None
    assert [r.name for r in sharing.resources] == names
    assert all(r.devices == ReplicaDevices(all=True) and r.replicas == 2 for r in sharing.resources)


@pytest.mark.parametrize(
    ("section", "field"),
    [
        pytest.param("null", "", id="TestUnmarshalReplicatedResources-0-empty-is-null"),
        pytest.param("{}", "", id="TestUnmarshalReplicatedResources-1"),
        pytest.param('{"resources": []}', ".resources", id="TestUnmarshalReplicatedResources-2"),
        pytest.param(
            '{"resources": [{"name": "$invalid$", "replicas": 2}]}',
            ".resources[0].name",
            id="TestUnmarshalReplicatedResources-5",
        ),
    ],
)
def test_replicated_resources_refused(tmp_path: Path, section: str, field: str) -> None:
    refused(tmp_path, f"sharing: {{timeSlicing: {section}}}\n", f"sharing.timeSlicing{field}")
    if section != "null":  # an MPS section left null is no MPS section (a nil pointer in Go)
        refused(tmp_path, f"sharing: {{mps: {section}}}\n", f"sharing.mps{field}")


def test_a_null_mps_section_is_no_mps(tmp_path: Path) -> None:
    assert load(tmp_path, "sharing: {mps: null}\n").mps is None


# -- imex_test.go ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fragment", "channel_ids"),
    [
        pytest.param("{}", (), id="TestImexUnmarshal-empty-json"),
        pytest.param('{"channelIDs": null}', (), id="TestImexUnmarshal-null-channel-ID-is-valid"),
        pytest.param('{"channelIDs": []}', (), id="TestImexUnmarshal-empty-channel-ID-is-valid"),
        pytest.param(
            '{"channelIDs": [0]}', (0,), id="TestImexUnmarshal-single-0-channel-ID-is-valid"
        ),
    ],
)
def test_imex_accepted(tmp_path: Path, fragment: str, channel_ids: tuple[int, ...]) -> None:
    assert settle(tmp_path, f"imex: {fragment}\n").imex == Imex(channel_ids=channel_ids)


def test_imex_invalid_channel(tmp_path: Path) -> None:
    """TestImexUnmarshal "invalid cases": [2] decodes, then AssertChannelIDsValid refuses it."""
    assert load(tmp_path, 'imex: {"channelIDs": [2]}\n').imex_channel_ids == (2,)
    reason = refused(tmp_path, 'imex: {"channelIDs": [2]}\n', "imex.channelIDs")
    assert reason == "channelIDs must be [] or [0]; found [2]"


# -- config_test.go --------------------------------------------------------------------

MPS_TWO = """
version: v1
sharing:
  mps:
    resources:
      - name: nvidia.com/gpu
        replicas: 2
"""


def test_new_config_defaults_mps_fail_requests_greater_than_one(tmp_path: Path) -> None:
    """TestNewConfigDefaultsMPSFailRequestsGreaterThanOne."""
    mps = settle(tmp_path, MPS_TWO, Overrides(mps_root="/run/nvidia/mps")).mps
    assert mps is not None
    assert mps.fail_requests_greater_than_one is True


def test_new_config_honors_explicit_mps_fail_requests_greater_than_one_false(
    tmp_path: Path,
) -> None:
    """TestNewConfigHonorsExplicitMPSFailRequestsGreaterThanOneFalse."""
    text = MPS_TWO.replace("  mps:\n", "  mps:\n    failRequestsGreaterThanOne: false\n")
    mps = settle(tmp_path, text, Overrides(mps_root="/run/nvidia/mps")).mps
    assert mps is not None
    assert mps.fail_requests_greater_than_one is False


# -- resources_test.go -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        pytest.param("1g.24gb", "1g.24gb", True, id="exact-match"),
        pytest.param("1g.24gb", "2g.48gb", False, id="no-match-on-different-string"),
        pytest.param("1g.24gb", "1g.24gb-me", False, id="does-not-substring-match-with-suffix"),
        pytest.param(
            "1g.24gb", "1g.24gb+me.all", False, id="does-not-substring-match-with-plus-suffix"
        ),
        pytest.param("1g.24gb", "x1g.24gb", False, id="does-not-substring-match-with-prefix"),
        pytest.param("1g.24gb-me", "1g.24gb-me", True, id="dash-me-suffix-matches-its-own-pattern"),
        pytest.param(
            "1g.24gb+me.all", "1g.24gb+me.all", True, id="plus-me.all-suffix-matches-its-own"
        ),
        pytest.param("*", "1g.24gb-me", True, id="wildcard-matches-everything"),
        pytest.param("1g.*", "1g.24gb", True, id="wildcard-prefix-match"),
        pytest.param(
            "1g.*", "2g.48gb", False, id="wildcard-prefix-does-not-match-different-prefix"
        ),
        pytest.param("1g.24gb+gfx", "1g.24gb+gfx", True, id="gfx-suffix-matches-its-own-pattern"),
        pytest.param("1g.24gb", "1g.24gb+gfx", False, id="base-pattern-does-not-match-gfx-suffix"),
        pytest.param("1g.24gb+gfx", "1g.24gb", False, id="gfx-pattern-does-not-match-base"),
        pytest.param("1g.24gb+gfx", "1g.24gb-me", False, id="gfx-pattern-does-not-match-me-suffix"),
        pytest.param(
            "2g.48gb+gfx", "2g.48gb+gfx", True, id="2g-gfx-suffix-matches-its-own-pattern"
        ),
        pytest.param("2g.48gb", "2g.48gb+gfx", False, id="2g-base-does-not-match-gfx-suffix"),
        pytest.param("*gb", "1g.24gb", True, id="wildcard-suffix-match"),
        pytest.param("*gb", "1g.24gb-me", False, id="wildcard-suffix-does-not-match-me-suffix"),
    ],
)
def test_resource_pattern_matches(tmp_path: Path, pattern: str, text: str, expected: bool) -> None:
    """TestResourcePatternMatches, through a file's resources.mig entry."""
    config = load(tmp_path, f"resources: {{mig: [{{pattern: '{pattern}', name: mig-x}}]}}\n")
    assert config.resources_mig == (ResourcePattern(pattern, "nvidia.com/mig-x"),)
    assert config.resources_mig[0].matches(text) is expected


# -- README.md, the chart's values.yaml, what NVIDIA prints ----------------------------

README_FLAGS = """
version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: "envvar"
    deviceIDStrategy: "uuid"
"""
README_HELM_CONFIG0 = """
version: v1
flags:
  migStrategy: "none"
  failOnInitError: true
  nvidiaDriverRoot: "/"
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
"""
README_HELM_CONFIG1 = README_HELM_CONFIG0.replace(
    'migStrategy: "none"', 'migStrategy: "mixed" # Only change from config0.yaml'
)
# The README's sharing examples end in a "..." line, an elision (YAML cannot parse it
# there, in NVIDIA's plugin either); it is left out.
README_TIME_SLICING = """
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""
README_TIME_SLICING_RENAMED = """
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""


@pytest.mark.parametrize(
    ("text", "mig"),
    [
        pytest.param(README_FLAGS, "none", id="README-as-a-configuration-file"),
        pytest.param(README_HELM_CONFIG0, "none", id="README-helm-dp-example-config0"),
        pytest.param(README_HELM_CONFIG1, "mixed", id="README-helm-dp-example-config1"),
        pytest.param(
            "version: v1\nflags:\n  migStrategy: none\n", "none", id="chart-values-default"
        ),
        pytest.param(
            "version: v1\nflags:\n  migStrategy: single\n", "single", id="chart-values-mig-single"
        ),
        pytest.param(
            "version: v1\nflags:\n  migStrategy: mixed\n", "mixed", id="chart-values-mig-mixed"
        ),
    ],
)
def test_documented_flag_files(tmp_path: Path, text: str, mig: str) -> None:
    settings = settle(tmp_path, text)
    assert settings.mig_strategy == mig
    assert settings.fail_on_init_error is True
    assert settings.driver_root == settings.dev_root == Path("/")
    assert settings.allocate.pass_device_specs is False
    assert settings.allocate.device_list_strategies == ("envvar",)
    assert settings.allocate.device_id_strategy == "uuid"


@pytest.mark.parametrize(
    ("text", "rename"),
    [
        pytest.param(README_TIME_SLICING, "nvidia.com/gpu", id="README-time-slicing"),
        pytest.param(
            README_TIME_SLICING_RENAMED, "nvidia.com/gpu.shared", id="README-time-slicing-renamed"
        ),
    ],
)
def test_documented_time_slicing(tmp_path: Path, text: str, rename: str) -> None:
    sharing = settle(tmp_path, text).time_slicing
    [entry] = sharing.resources
    assert (entry.name, entry.rename, entry.replicas, entry.devices) == (
        "nvidia.com/gpu",
        rename,
        10,
        ReplicaDevices(all=True),
    )
    assert sharing.fail_requests_greater_than_one is False


@pytest.mark.parametrize(
    ("text", "rename"),
    [
        pytest.param(
            README_TIME_SLICING.replace("timeSlicing", "mps"), "nvidia.com/gpu", id="README-mps"
        ),
        pytest.param(
            README_TIME_SLICING_RENAMED.replace("timeSlicing", "mps"),
            "nvidia.com/gpu.shared",
            id="README-mps-renamed",
        ),
    ],
)
def test_documented_mps(tmp_path: Path, text: str, rename: str) -> None:
    """NVIDIA's chart always sets MPS_ROOT; without an MPS root NVIDIA refuses MPS too."""
    assert "MPS root" in refused(tmp_path, text, "sharing.mps")
    mps = settle(tmp_path, text, Overrides(mps_root="/run/nvidia/mps")).mps
    assert mps is not None
    [entry] = mps.resources
    assert (entry.name, entry.rename, entry.replicas) == ("nvidia.com/gpu", rename, 10)
    assert mps.fail_requests_greater_than_one is True


# What main.go logs as "Running with config" with every default (json.MarshalIndent of the
# config after NewConfig and AddDefaultResourcesToConfig; GFD's flags are cleared first).
PRINTED_DEFAULTS = """{
  "version": "v1",
  "flags": {
    "migStrategy": "none",
    "failOnInitError": true,
    "mpsRoot": "",
    "nvidiaDriverRoot": "/",
    "nvidiaDevRoot": "/",
    "gdrcopyEnabled": false,
    "gdsEnabled": false,
    "mofedEnabled": false,
    "useNodeFeatureAPI": null,
    "deviceDiscoveryStrategy": "auto",
    "plugin": {
      "passDeviceSpecs": false,
      "deviceListStrategy": [
        "envvar"
      ],
      "deviceIDStrategy": "uuid",
      "cdiAnnotationPrefix": "cdi.k8s.io/",
      "nvidiaCTKPath": "/usr/bin/nvidia-ctk",
      "containerDriverRoot": "/driver-root",
      "sharedDevicesAllocationPolicy": "distributed"
    }
  },
  "resources": {
    "gpus": [
      {
        "pattern": "*",
        "name": "nvidia.com/gpu"
      }
    ]
  },
  "sharing": {
    "timeSlicing": {}
  },
  "imex": {}
}
"""


def test_printed_defaults_load_to_our_defaults(tmp_path: Path) -> None:
    """Every value NVIDIA prints as its default is ours, once the empty timeSlicing is out."""
    text = PRINTED_DEFAULTS.replace('"sharing": {\n    "timeSlicing": {}\n  },\n', "")
    settings = settle(tmp_path, text)
    assert settings.source == str(tmp_path / "config.yaml")
    assert _values(settings) == _values(resolve(Overrides()))
    config = load(tmp_path, text)
    assert config.resources_gpus == (ResourcePattern("*", "nvidia.com/gpu"),)
    assert config.ignored == ()


def test_printed_empty_time_slicing_is_refused_as_nvidia_refuses_it(tmp_path: Path) -> None:
    """NVIDIA prints ``"timeSlicing": {}``, which its own parser refuses (no resources)."""
    reason = refused(tmp_path, PRINTED_DEFAULTS, "sharing.timeSlicing")
    assert "no resources specified" in reason


def _values(settings: NvidiaSettings) -> dict[str, object]:
    """The settings, less where they came from."""
    names = set(NvidiaSettings.__dataclass_fields__) - {"source", "imex_source"}
    return {name: getattr(settings, name) for name in names}


def test_an_empty_file_is_v1_defaults(tmp_path: Path) -> None:
    settings = settle(tmp_path, "")
    assert _values(settings) == _values(resolve(Overrides()))
