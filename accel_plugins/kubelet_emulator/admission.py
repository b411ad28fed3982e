"""Pod admission on the emulator, the way the kubelet's device manager admits a pod.

The admitter and the steps it follows are :mod:`.pod_admitter`; how a
container's devices are chosen, :mod:`.device_choice`; the outcome and its
text, :mod:`.admission_outcome`; ``accel-plugins kubelet --admit``,
:mod:`.admit_command`. Every name is importable from here, as before the split.
"""

from __future__ import annotations

from accel_plugins.kubelet_emulator.admission_outcome import (
    Admission,
    ContainerAdmission,
    Grant,
    Hints,
    PreStart,
    render_admission,
    response_lines,
)
from accel_plugins.kubelet_emulator.admit_command import (
    admit_pods,
    admitting,
    parse_numa_nodes,
    wait_for_resources,
)
from accel_plugins.kubelet_emulator.device_choice import (
    Choice,
    DeviceAllocationError,
    PreferredAsk,
    PreferredCall,
    devices_to_allocate,
    filter_by_affinity,
)
from accel_plugins.kubelet_emulator.pod_admitter import (
    INVALID,
    TOPOLOGY_AFFINITY_ERROR,
    UNEXPECTED_ADMISSION_ERROR,
    PodAdmitter,
)

__all__ = [
    "INVALID",
    "TOPOLOGY_AFFINITY_ERROR",
    "UNEXPECTED_ADMISSION_ERROR",
    "Admission",
    "Choice",
    "ContainerAdmission",
    "DeviceAllocationError",
    "Grant",
    "Hints",
    "PodAdmitter",
    "PreStart",
    "PreferredAsk",
    "PreferredCall",
    "admit_pods",
    "admitting",
    "devices_to_allocate",
    "filter_by_affinity",
    "parse_numa_nodes",
    "render_admission",
    "response_lines",
    "wait_for_resources",
]
