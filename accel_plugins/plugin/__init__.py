"""The interface a backend implements, and everything a backend author imports.

A backend describes devices (:class:`Device`) and publishes :class:`DeviceTree`
snapshots; it optionally answers the hooks (:class:`Allocator`,
:class:`PreferredAllocator`, :class:`PreStarter`, :class:`MetricsProvider`,
:class:`CdiSpecKeeper`, :class:`Warmer`, :class:`PreferenceWarmer`) and the DRA
capabilities (``Dra*``), and
becomes ``accel-plugins <name>`` through a :class:`BackendCommand` named in the
entry-point group :data:`ENTRY_POINT_GROUP`. Either mode then serves it: the
device plugin (:mod:`accel_plugins.deviceplugin`) or the DRA driver
(:mod:`accel_plugins.dra`), both on :mod:`accel_plugins.runtime`.

May import only :mod:`accel_plugins.util` and ``accel_plugins.errors``: never a
mode, the runtime, a backend or grpc. See docs/writing-a-backend.md.
"""

from typing import TYPE_CHECKING

from accel_plugins.errors import (
    AccelPluginsError,
    AllocationError,
    BackendError,
    ConfigError,
    HookError,
    InvalidSnapshotError,
)
from accel_plugins.plugin.allocation import (
    check_preferred_request,
    natural_key,
    prefer_fewest_numa_nodes,
    spans_numa_nodes,
)
from accel_plugins.plugin.backend import (
    Allocator,
    Backend,
    CdiSpecKeeper,
    Holders,
    MetricsProvider,
    PodRef,
    PreferenceScope,
    PreferenceWarmer,
    PreferredAllocator,
    PreStarter,
    Publish,
    Warmer,
)
from accel_plugins.plugin.command import (
    ENTRY_POINT_GROUP,
    BackendCommand,
    BackendContext,
    BackendFactory,
    InUse,
    Option,
)
from accel_plugins.plugin.device import (
    ContainerAllocation,
    Device,
    DeviceNode,
    DeviceTree,
    Health,
    Mount,
    tree,
)
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from accel_plugins.util.lazyattrs import lazy_getattr

if TYPE_CHECKING:
    from accel_plugins.plugin.cdi import (
        CdiDevice,
        CdiHook,
        CdiMount,
        CdiSpec,
        CdiSpecWriter,
        ContainerEdits,
    )
    from accel_plugins.plugin.dra_attributes import (
        DraCounterSets,
        DraDescriber,
        DraDeviceInfo,
        DraVersion,
        pci_attributes,
        pcie_root,
    )
    from accel_plugins.plugin.dra_config import (
        ClaimParameters,
        ClaimParametersError,
        DraConfigAllocator,
    )
    from accel_plugins.plugin.dra_names import DraNamer
    from accel_plugins.plugin.dra_shares import DraSharedUnits
    from accel_plugins.plugin.dra_taints import DraTaintKeyer

# The CDI writer (with tempfile behind it) and the DRA description load on first
# use: most plugins use neither, and every plugin process imports this package
# on its way up (issue 17's start-up budget).
_LAZY = {
    **{
        name: "accel_plugins.plugin.cdi"
        for name in (
            "CdiDevice",
            "CdiHook",
            "CdiMount",
            "CdiSpec",
            "CdiSpecWriter",
            "ContainerEdits",
        )
    },
    **{
        name: "accel_plugins.plugin.dra_attributes"
        for name in (
            "DraCounterSets",
            "DraDescriber",
            "DraDeviceInfo",
            "DraVersion",
            "pci_attributes",
            "pcie_root",
        )
    },
    **{
        name: "accel_plugins.plugin.dra_config"
        for name in ("ClaimParameters", "ClaimParametersError", "DraConfigAllocator")
    },
    "DraNamer": "accel_plugins.plugin.dra_names",
    "DraSharedUnits": "accel_plugins.plugin.dra_shares",
    "DraTaintKeyer": "accel_plugins.plugin.dra_taints",
}


__getattr__ = lazy_getattr(globals(), _LAZY)

__all__ = [
    "ENTRY_POINT_GROUP",
    "AccelPluginsError",
    "AllocationError",
    "Allocator",
    "Backend",
    "BackendCommand",
    "BackendContext",
    "BackendError",
    "BackendFactory",
    "CdiDevice",
    "CdiHook",
    "CdiMount",
    "CdiSpec",
    "CdiSpecKeeper",
    "CdiSpecWriter",
    "ClaimParameters",
    "ClaimParametersError",
    "ConfigError",
    "ContainerAllocation",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "DeviceTree",
    "DraConfigAllocator",
    "DraCounterSets",
    "DraDescriber",
    "DraDeviceInfo",
    "DraNamer",
    "DraSharedUnits",
    "DraTaintKeyer",
    "DraVersion",
    "Health",
    "HealthReason",
    "Holders",
    "HookError",
    "InUse",
    "InvalidSnapshotError",
    "MetricsProvider",
    "Mount",
    "Option",
    "PodRef",
    "PreStarter",
    "PreferenceScope",
    "PreferenceWarmer",
    "PreferredAllocator",
    "Publish",
    "ReasonKind",
    "Warmer",
    "check_preferred_request",
    "natural_key",
    "pci_attributes",
    "pcie_root",
    "prefer_fewest_numa_nodes",
    "spans_numa_nodes",
    "tree",
]
