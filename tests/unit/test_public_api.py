"""``accel_plugins.plugin`` is the whole API a backend author needs, and cheap to import."""

from __future__ import annotations

import inspect
import subprocess
import sys

import accel_plugins.plugin as api

# What a backend touches, by the guide's sections: devices, hooks, command, errors, policies.
EXPECTED = {
    "Backend", "Publish", "Device", "DeviceNode", "Mount", "Health", "DeviceTree", "tree",
    "ContainerAllocation", "Allocator", "PreferredAllocator", "PreStarter", "PreferenceScope",
    "MetricsProvider",
    "Holders", "PodRef", "BackendCommand", "BackendContext", "BackendFactory", "Option", "InUse",
    "ENTRY_POINT_GROUP", "AccelPluginsError", "AllocationError", "BackendError", "ConfigError",
    "HookError", "InvalidSnapshotError", "check_preferred_request", "natural_key",
    "prefer_fewest_numa_nodes", "spans_numa_nodes",
    "CdiSpec", "CdiDevice", "ContainerEdits", "CdiMount", "CdiHook", "CdiSpecWriter",
    "DraDescriber", "DraDeviceInfo", "DraVersion", "pci_attributes", "pcie_root", "DraNamer",
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
