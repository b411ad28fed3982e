"""The vendor-neutral device plugin framework.

Data flows one way: a Backend publishes DeviceTree snapshots, the Manager diffs
them and drives one PluginServer per resource. Nothing here imports a backend.
"""

from accel_plugins.plugin.backend import (
    Allocator,
    Backend,
    Holders,
    MetricsProvider,
    PodRef,
    PreferredAllocator,
    PreStarter,
    Publish,
)
from accel_plugins.plugin.device import (
    ContainerAllocation,
    Device,
    DeviceNode,
    DeviceTree,
    Health,
    Mount,
)

__all__ = [
    "Allocator",
    "Backend",
    "ContainerAllocation",
    "Device",
    "DeviceNode",
    "DeviceTree",
    "Health",
    "Holders",
    "MetricsProvider",
    "Mount",
    "PodRef",
    "PreStarter",
    "PreferredAllocator",
    "Publish",
]
