"""Every check of the kit: its ID, profile, rule, and where the rule is written.

Required checks are rules the kubelet or the API relies on, which drivers built
on Kubernetes' own ``kubeletplugin`` library meet. Recommended ones are what a
driver on a real node should do but the library itself does not do for its
drivers, or features a driver may not offer (then the check is skipped with
the reason). ``needs`` names checks whose failure makes this one meaningless:
it is then skipped, so one fault fails one check.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

K8S = "kubernetes/kubernetes"
DRA_PROTO = f"{K8S} staging/src/k8s.io/kubelet/pkg/apis/dra/v1/api.proto"
REG_PROTO = f"{K8S} staging/src/k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto"
HEALTH_PROTO = f"{K8S} staging/src/k8s.io/kubelet/pkg/apis/dra-health/v1alpha1/api.proto"
TYPES = f"{K8S} staging/src/k8s.io/api/resource/v1/types.go"
KUBELET_DRA = f"{K8S} pkg/kubelet/cm/dra"
LIBRARY = f"{K8S} staging/src/k8s.io/dynamic-resource-allocation/kubeletplugin"
CDI_SPEC = "cncf-tags/container-device-interface SPEC.md"


class Profile(enum.Enum):
    REQUIRED = "required"
    RECOMMENDED = "recommended"


@dataclass(frozen=True)
class Check:
    id: str
    profile: Profile
    rule: str  # what the driver must do, in one sentence
    source: str  # where the rule is written
    needs: tuple[str, ...] = ()
    needs_command: bool = False  # the kit must start the driver (restart, reboot)


R, REC = Profile.REQUIRED, Profile.RECOMMENDED

CHECKS: tuple[Check, ...] = (
    Check(
        "registration",
        R,
        "Registers through the plugin watcher: GetInfo says type DRAPlugin, the driver's name "
        "(a DNS subdomain) and an endpoint that is a unix socket; NotifyRegistrationStatus "
        "is accepted.",
        f"{REG_PROTO}; {K8S} pkg/kubelet/pluginmanager/operationexecutor/"
        "operation_generator.go (GetInfo, the handler by type, NotifyRegistrationStatus)",
    ),
    Check(
        "versions",
        R,
        "supported_versions names v1.DRAPlugin or v1beta1.DRAPlugin, and every DRA service it "
        "names answers NodePrepareResources.",
        f"{KUBELET_DRA}/plugin/dra_plugin_manager.go (validateSupportedServices: the first "
        f"the kubelet speaks, in the plugin's order); {LIBRARY}/draplugin.go (serves both)",
        needs=("registration",),
    ),
    Check(
        "slices-node",
        R,
        "Publishes slices for this node only (spec.nodeName), in pools no other node publishes.",
        f"{TYPES} (ResourceSliceSpec.NodeName, ResourcePool.Name: unique per driver); "
        "KEP-4381 (a node's kubelet plugin publishes that node's devices)",
        needs=("registration",),
    ),
    Check(
        "slices-pools",
        R,
        "Each pool is complete and consistent: all its slices carry the newest generation, "
        "their number is resourceSliceCount, and device names are unique in the pool.",
        f"{TYPES} (ResourcePool.Generation, ResourceSliceCount)",
        needs=("registration",),
    ),
    Check(
        "slices-valid",
        R,
        "Slices keep the API's limits and formats: at most 128 devices per slice (64 when "
        "devices have taints or counters, from 1.35), at most 32 "
        "attributes and capacities per device, device names DNS labels, attribute names "
        "qualified names, each attribute exactly one of bool, int, string (64 bytes at most) "
        "or a semantic version.",
        f"{TYPES} (ResourceSliceMaxDevices, ResourceSliceMaxAttributesAndCapacitiesPerDevice, "
        "DeviceAttributeMaxValueLength, QualifiedName; 1.35: ResourceSliceMaxDevicesWith"
        "TaintsOrConsumesCounters)",
        needs=("registration",),
    ),
    Check(
        "prepare",
        R,
        "NodePrepareResources answers an allocated claim with exactly its devices of this "
        "driver (request names, pool and device as allocated) and CDI device IDs that a valid "
        "CDI spec on disk defines.",
        f"{DRA_PROTO} (Device: request_names, pool_name, device_name, cdi_device_ids); "
        f"{CDI_SPEC} (spec fields, qualified device names)",
        needs=("versions",),
    ),
    Check(
        "prepare-idempotent",
        R,
        "Preparing a prepared claim again succeeds with the same answer.",
        f"{LIBRARY}/draplugin.go (DRAPlugin.PrepareResourceClaims: must be idempotent, the "
        "kubelet may ask again)",
        needs=("prepare",),
    ),
    Check(
        "unprepare-idempotent",
        R,
        "Unpreparing a claim twice succeeds both times.",
        f"{LIBRARY}/draplugin.go (DRAPlugin.UnprepareResourceClaims: must be idempotent)",
        needs=("prepare",),
    ),
    Check(
        "unprepare-unknown",
        R,
        "Unpreparing a claim the driver never prepared succeeds.",
        f"{LIBRARY}/draplugin.go (UnprepareResourceClaims: not an error for a claim that is "
        f"not prepared); {KUBELET_DRA}/manager.go (unprepares what its checkpoint holds)",
        needs=("versions",),
    ),
    Check(
        "other-drivers",
        R,
        "Devices of other drivers in a claim's allocation are not answered for.",
        f"{DRA_PROTO} (devices: those of this driver); {KUBELET_DRA}/manager.go "
        "(one call per driver, each driver's devices)",
        needs=("prepare",),
    ),
    Check(
        "prepare-error",
        R,
        "A claim that cannot be prepared (it does not exist) is reported: its error field, the "
        "call's error, or left out of the answer; never an answer without an error, which the "
        "kubelet takes for a prepared claim.",
        f"{DRA_PROTO} (NodePrepareResourceResponse.error; a missing claim is not prepared); "
        f"{KUBELET_DRA}/manager.go (prepareResources: an entry without error is prepared)",
        needs=("versions",),
    ),
    Check(
        "concurrent",
        R,
        "Concurrent NodePrepareResources and NodeUnprepareResources calls for different claims "
        "each get their own, correct answer.",
        f"{KUBELET_DRA}/manager.go (pods are prepared in parallel, one call per pod and driver)",
        needs=("prepare",),
    ),
    Check(
        "restart",
        R,
        "A driver restarted between Prepare and Unprepare prepares the same claim again with "
        "the same answer, and then unprepares it.",
        f"{LIBRARY}/draplugin.go (idempotent calls); {KUBELET_DRA}/manager.go (the kubelet's "
        "checkpoint, not the driver's memory, says what is prepared)",
        needs=("prepare",),
        needs_command=True,
    ),
    Check(
        "one-bad-claim",
        REC,
        "One claim that cannot be prepared fails alone: the other claims of the same call are "
        "prepared.",
        f"{DRA_PROTO} (failures of single claims go in the response); not required because "
        f"the library fails the whole call when one claim cannot be read ({LIBRARY}/"
        "draplugin.go NodePrepareResources, getResourceClaims)",
        needs=("prepare", "prepare-error"),
    ),
    Check(
        "reboot",
        REC,
        "After a reboot (the CDI specs the driver wrote are gone, a new boot ID) a claim "
        "prepared before is prepared again with CDI IDs that a spec on disk defines.",
        f"{K8S}#141433 (the reference driver loses its CDI specs on reboot); {CDI_SPEC} "
        "(/var/run/cdi is emptied on reboot)",
        needs=("prepare",),
        needs_command=True,
    ),
    Check(
        "health",
        REC,
        "When the health stream is served, it lists every published device and sets "
        "health_check_timeout_seconds.",
        f"{HEALTH_PROTO} (DeviceHealth.health_check_timeout_seconds, 1.35+; the kubelet "
        f"counts a device Unknown after it, 30 s by default: {KUBELET_DRA}/healthinfo.go); "
        "KEP-4680. The library never sets it",
        needs=("registration",),
    ),
    Check(
        "taints",
        REC,
        "Device taints are well formed: a label key, a label value, an effect of NoSchedule, "
        "NoExecute or None (1.35+), and at most 16 per device (4 in 1.34).",
        f"{TYPES} (DeviceTaint, DeviceTaintsMaxLength); KEP-5055",
        needs=("registration",),
    ),
    Check(
        "shares",
        REC,
        "Two claims sharing one device (allowMultipleAllocations) are prepared, each answer "
        "with its own share_id.",
        f"{DRA_PROTO} (Device.share_id); {TYPES} (DeviceRequestAllocationResult.ShareID); KEP-5075",
        needs=("prepare",),
    ),
    Check(
        "subrequests",
        REC,
        "A device allocated for a subrequest (r0/s0) is answered under its main request's "
        "name (r0) or with no request names: a container names the main request, and the "
        "kubelet matches request names exactly.",
        f"{TYPES} (DeviceRequestAllocationResult.Request: <main request>/<subrequest>); "
        f"{KUBELET_DRA}/claiminfo.go (cdiDevicesAsList); {LIBRARY}/draplugin.go "
        "(stripSubrequestNames); KEP-4816",
        needs=("prepare",),
    ),
    Check(
        "admin-access",
        REC,
        "A claim with admin access to a device that another claim holds is prepared, with CDI "
        "IDs a spec defines.",
        f"{TYPES} (DeviceRequestAllocationResult.AdminAccess); KEP-5018",
        needs=("prepare",),
    ),
    Check(
        "kubelet-restart",
        REC,
        "After the kubelet's restart (this node's slices deleted, the driver registered again "
        "through the plugin watcher) the driver publishes its slices again within the bound.",
        f"{KUBELET_DRA}/plugin/dra_plugin_manager.go (the node's slices are wiped at start-up "
        "and 30 s after a driver's connection is lost; the kubelet never re-creates them); "
        f"{K8S} staging/src/k8s.io/dynamic-resource-allocation/resourceslice/"
        "resourceslicecontroller.go (the library re-creates a deleted slice after 30 s, or a "
        "minute after it last wrote it)",
        needs=("slices-pools",),
    ),
)

BY_ID = {check.id: check for check in CHECKS}


def unknown(ids: list[str]) -> list[str]:
    """The IDs that name no check."""
    return [i for i in ids if i not in BY_ID]


def check_list() -> str:
    """Every check, its profile, rule and source: ``--help``'s epilog and ``--list``."""
    lines = []
    for profile in Profile:
        lines.append(f"{profile.value} checks:")
        for c in (c for c in CHECKS if c.profile is profile):
            extra = " [needs --driver-command]" if c.needs_command else ""
            lines.append(f"  {c.id}{extra}: {c.rule}")
            lines.append(f"      source: {c.source}")
    return "\n".join(lines)
