"""What an XID number means, as the reason an Unhealthy GPU carries.

The meanings are NVIDIA's short descriptions from its published XID catalogue
(docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors with the Xid
Catalog") for the XIDs NVIDIA's device plugin names (the application errors
it ignores, NVIDIA/k8s-device-plugin internal/rm/health.go) and the common
hardware ones. An XID outside the table still carries its number; its detail
then only says that it is not in the table.

:data:`NON_FATAL_XIDS` are the ones NVIDIA treats as application errors, not
faults of the GPU ("Application errors: the GPU should still be healthy",
NVIDIA/k8s-device-plugin internal/rm/health.go): the health monitor ignores them unless
``DP_ENABLE_HEALTHCHECKS`` names them, and a reason built for one is not
``fatal``, so its DRA device taint is informational (effect ``None``), as
kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_health.go
(``healthEventToTaint``, ``IsEventNonFatal``) publishes them.
"""

from __future__ import annotations

from types import MappingProxyType

from accel_plugins.plugin.health_reason import HealthReason, ReasonKind

XID_MEANINGS: MappingProxyType[int, str] = MappingProxyType(
    {
        8: "GPU stopped processing",
        13: "Graphics Engine Exception",
        31: "GPU memory page fault",
        32: "Invalid or corrupted push buffer stream",
        38: "Driver firmware error",
        43: "GPU stopped processing",
        45: "Preemptive cleanup, due to previous errors",
        48: "Double Bit ECC Error",
        61: "Internal micro-controller breakpoint/warning",
        62: "Internal micro-controller halt",
        63: "ECC page retirement or row remapping recording event",
        64: "ECC page retirement or row remapper recording failure",
        68: "Video processor exception",
        69: "Graphics Engine class error",
        74: "NVLink Error",
        79: "GPU has fallen off the bus",
        92: "High single-bit ECC error rate",
        94: "Contained ECC error",
        95: "Uncontained ECC error",
        109: "Context Switch Timeout Error",
        119: "GSP RPC Timeout",
        120: "GSP Error",
    }
)

# NVIDIA's application-error XIDs (the same six as health.py DEFAULT_IGNORED_XIDS).
NON_FATAL_XIDS = frozenset({13, 31, 43, 45, 68, 109})

UNLISTED = "not in the XID table; see NVIDIA's XID catalogue"


def xid_meaning(xid: int) -> str:
    """NVIDIA's description of ``xid``, or a pointer to the catalogue."""
    return XID_MEANINGS.get(xid, UNLISTED)


def xid_reason(xid: int) -> HealthReason:
    """The reason ``xid`` gives a device: kind ``xid``, its number and meaning; not
    ``fatal`` for an application error (:data:`NON_FATAL_XIDS`)."""
    return HealthReason(ReasonKind.XID, xid_meaning(xid), code=xid, fatal=xid not in NON_FATAL_XIDS)
