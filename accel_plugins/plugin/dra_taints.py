"""How a backend keys the DRA device taint of an Unhealthy device (optional capability).

A DRA driver that publishes device taints (KEP-5055, ``DRADeviceTaints``) marks an
Unhealthy device with the key ``<driver>/unhealthy`` unless the backend names a
vendor key for the device's reason, e.g. ``gpu.nvidia.com/xid`` for an XID error,
so that a claim can tolerate one kind of fault and not the others. The taint's
value and effect, and how a claim's toleration matches it, are here too: both the
slices (dra/kube/taints.py) and Prepare (a claim allocated a tainted device must
tolerate it) read them.

The effect follows the reason (:func:`effect_of`): ``None`` for an informational
one (``unmonitored``; an XID NVIDIA does not treat as fatal: see
:attr:`~accel_plugins.plugin.health_reason.HealthReason.informational`),
``NoSchedule`` for every other reason and for an Unhealthy device without one.
Facts (KEP-5055, kubernetes/enhancements keps/sig-scheduling/5055-dra-device-taints-
and-tolerations/README.md): "`Effect: None` can be used to publish taints which
are merely informational. Such taints are ignored during scheduling and cause no
eviction. Therefore it is not necessary to specify tolerations for them"; it
"is only valid for Kubernetes >= 1.35" (1.33/1.34 validation, pkg/apis/resource/
validation/validation.go ``validDeviceTaintEffects``, accepts NoSchedule and
NoExecute only: a write with ``None`` is refused, 422 "Unsupported value"). So a
taint with effect ``None`` is not :attr:`TaintId.required`: every claim may use
the device (:func:`tolerated`), as a 1.36 kube-scheduler allocates it to a claim
without tolerations. Where the API server refuses ``None`` the slices carry
``NoSchedule`` instead (``taint_of(..., informational=False)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from accel_plugins.plugin.device import Device
from accel_plugins.plugin.health_reason import HealthReason


@runtime_checkable
class DraTaintKeyer(Protocol):
    """Backend capability: the taint key for an Unhealthy device, or None for the default.

    The key must be a label name (an optional DNS-subdomain prefix and ``/``,
    then at most 63 characters). Called on the event loop for every Unhealthy
    device of every tree: answer from ``device.reason``.
    """

    def dra_taint_key(self, resource: str, device: Device) -> str | None: ...


EFFECT = "NoSchedule"  # running pods keep their device; NoExecute would evict them
INFORMATIONAL_EFFECT = "None"  # KEP-5055, 1.35+: no effect on scheduling or eviction
DEFAULT_KEY_NAME = "unhealthy"
NO_REASON = "unknown"
MAX_LABEL_VALUE = 63
_NOT_VALUE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
_EDGES = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value: [A-Za-z0-9_.-], alphanumeric ends, <= 63."""
    value = _NOT_VALUE_CHARS.sub("-", text)[:MAX_LABEL_VALUE]
    return _EDGES.sub("", value)


def reason_value(device: Device) -> str:
    """The taint value: the device's reason ("xid 79: fell off" -> "xid-79-fell-off")."""
    return label_value(str(device.reason)) if device.reason is not None else NO_REASON


def effect_of(reason: HealthReason | None) -> str:
    """The taint effect for an Unhealthy device's ``reason``: ``None`` where the reason
    is informational, ``NoSchedule`` otherwise (no reason included: the backend said
    Unhealthy without saying why)."""
    return INFORMATIONAL_EFFECT if reason is not None and reason.informational else EFFECT


@dataclass(frozen=True, slots=True)
class TaintId:
    """What identifies a device taint to a toleration."""

    key: str
    value: str
    effect: str = EFFECT

    @property
    def required(self) -> bool:
        """Whether a claim needs a toleration to use the device (False for effect None,
        which the scheduler ignores: KEP-5055)."""
        return self.effect != INFORMATIONAL_EFFECT


def taint_of(
    driver: str,
    keyer: DraTaintKeyer | None,
    resource: str,
    device: Device,
    *,
    informational: bool = True,
) -> TaintId:
    """The taint the driver's slices give an Unhealthy ``device``; ``informational``
    False where the API server refuses effect None (before 1.35): ``NoSchedule`` then."""
    key = keyer.dra_taint_key(resource, device) if keyer is not None else None
    effect = effect_of(device.reason) if informational else EFFECT
    return TaintId(key or f"{driver}/{DEFAULT_KEY_NAME}", reason_value(device), effect)


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    """A claim's toleration of device taints (resource.k8s.io DeviceToleration)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: TaintId) -> bool:
        """Kubernetes' rules (k8s.io/dynamic-resource-allocation resourceclaim
        ToleratesTaint): an empty effect or key matches any, Exists any value,
        Equal (the default) the same value, any other operator nothing. A taint
        that needs no toleration (effect None) lets every claim use the device, so
        any toleration answers True for it (KEP-5055: a toleration of it "has no
        effect")."""
        if not taint.required:
            return True
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"


def tolerated(taint: TaintId, tolerations: Iterable[DeviceToleration]) -> bool:
    """Whether a claim with ``tolerations`` may use a device tainted ``taint``: always
    for a taint that needs none (effect None), else where one of them tolerates it."""
    return not taint.required or any(t.tolerates(taint) for t in tolerations)
