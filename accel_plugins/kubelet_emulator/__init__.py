"""The kubelet emulator: the kubelet's device manager, DRA manager and plugin watcher, emulated.

For tests, the demo, ``accel-plugins kubelet`` and ``inspect`` (whose plugin client
lives here). It speaks only the public kubelet APIs (device plugin v1beta1,
pluginregistration v1, DRA v1 and v1beta1, PodResources v1) and never imports the
framework, a mode or a backend, so it can face any vendor's plugin. DRA drivers its
plugin watcher finds are registered in ``Kubelet.dra`` and called through
:class:`DraClient`.

May import: :mod:`accel_plugins.kube` (the API client, for claims), :mod:`accel_plugins.util`,
``errors`` and ``api``. The product (runtime, modes, backends) never imports it.
"""

from accel_plugins.kubelet_emulator.allocation import AllocationRecord
from accel_plugins.kubelet_emulator.client import PluginClient
from accel_plugins.kubelet_emulator.dra import (
    DraClaim,
    DraClaimResult,
    DraClient,
    DraDevice,
    DraDeviceHealth,
    DraDrivers,
)
from accel_plugins.kubelet_emulator.emulator import Kubelet
from accel_plugins.kubelet_emulator.errors import (
    AllocationConflictError,
    CheckpointError,
    InsufficientDevicesError,
    InvalidPluginAnswerError,
    KubeletError,
    PluginCallError,
    ResourceUnavailableError,
    UnknownResourceError,
)
from accel_plugins.kubelet_emulator.model import (
    HEALTHY,
    UNHEALTHY,
    ContainerResponse,
    DeviceSpec,
    DeviceState,
    MountSpec,
    PluginOptions,
)
from accel_plugins.kubelet_emulator.names import SUPPORTED_VERSIONS
from accel_plugins.kubelet_emulator.registration import Registration, Rejection
from accel_plugins.kubelet_emulator.serve_command import serve
from accel_plugins.kubelet_emulator.state import ResourceView

__all__ = [
    "HEALTHY",
    "SUPPORTED_VERSIONS",
    "UNHEALTHY",
    "AllocationConflictError",
    "AllocationRecord",
    "CheckpointError",
    "ContainerResponse",
    "DeviceSpec",
    "DeviceState",
    "DraClaim",
    "DraClaimResult",
    "DraClient",
    "DraDevice",
    "DraDeviceHealth",
    "DraDrivers",
    "InsufficientDevicesError",
    "InvalidPluginAnswerError",
    "Kubelet",
    "KubeletError",
    "MountSpec",
    "PluginCallError",
    "PluginClient",
    "PluginOptions",
    "Registration",
    "Rejection",
    "ResourceUnavailableError",
    "ResourceView",
    "UnknownResourceError",
    "serve",
]
