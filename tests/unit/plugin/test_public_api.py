"""``accel_plugins.plugin`` is the whole API a backend author needs, and cheap to import."""

from __future__ import annotations

import inspect
import subprocess
import sys

import accel_plugins.plugin as api
from tests.support.repo import ROOT as REPO_ROOT

# What a backend touches, by the guide's sections: devices, hooks, command, errors, policies.
EXPECTED = {
    "Backend", "Publish", "Device", "DeviceNode", "Mount", "Health", "DeviceTree", "tree",
    "HealthReason", "ReasonKind",
    "ContainerAllocation", "Allocator", "PreferredAllocator", "PreStarter", "PreferenceScope",
    "MetricsProvider", "CdiSpecKeeper", "Warmer", "PreferenceWarmer", "Holders", "PodRef",
    "BackendCommand", "BackendContext", "BackendFactory", "Option", "InUse",
    "ENTRY_POINT_GROUP", "AccelPluginsError", "AllocationError", "BackendError", "ConfigError",
    "HookError", "InvalidSnapshotError", "check_preferred_request", "natural_key",
    "prefer_fewest_numa_nodes", "spans_numa_nodes",
    "CdiSpec", "CdiDevice", "ContainerEdits", "CdiMount", "CdiHook", "CdiSpecWriter",
    "DraDescriber", "DraDeviceInfo", "DraVersion", "pci_attributes", "pcie_root", "DraNamer",
    "DraTaintKeyer", "DraCounterSets", "DraConfigAllocator", "ClaimParameters",
    "ClaimParametersError", "DraSharedUnits",
}  # fmt: skip


def test_all_lists_exactly_the_backend_api() -> None:
    assert set(api.__all__) == EXPECTED
    assert len(api.__all__) == len(set(api.__all__))


def test_every_export_is_documented() -> None:
    # Type aliases (Publish, DeviceTree, ...) are documented in their modules'
    # source, which runtime objects cannot show; classes and functions must say.
    undocumented = [
        name
        for name in api.__all__
        if isinstance(getattr(api, name), type) or inspect.isfunction(getattr(api, name))
        if not (getattr(api, name).__doc__ or "").strip()
    ]
    assert undocumented == []


def test_importing_the_api_loads_no_heavy_module() -> None:
    code = (
        "import sys, accel_plugins.plugin; "
        "print(','.join(m for m in ('grpc', 'prometheus_client', 'yaml', 'pynvml', 'pyudev') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# The fields a backend author sets, each described in docs/writing-a-backend.md.
COMMAND_FIELDS = {
    "Option": [
        "flag", "help", "default", "type", "choices", "env", "metavar", "aliases", "repeat",
    ],
    "BackendCommand": [
        "summary", "build", "options", "requires", "extra", "install", "config_files",
        "dra_driver_name", "common_aliases",
    ],
}  # fmt: skip


def test_command_fields_are_the_documented_ones() -> None:
    import dataclasses

    guide = (REPO_ROOT / "docs" / "writing-a-backend.md").read_text()
    for name, expected in COMMAND_FIELDS.items():
        assert [f.name for f in dataclasses.fields(getattr(api, name))] == expected
        assert [f for f in expected if f not in guide] == []
