"""How a backend keys the DRA device taint of an Unhealthy device (optional capability).

A DRA driver that publishes device taints (KEP-5055, ``DRADeviceTaints``) marks an
Unhealthy device with the key ``<driver>/unhealthy`` unless the backend names a
vendor key for the device's reason, e.g. ``gpu.nvidia.com/xid`` for an XID error,
so that a claim can tolerate one kind of fault and not the others. The taint's
value and effect, and how a claim's toleration matches it, are here too: both the
slices (dra/kube/taints.py) and Prepare (a claim allocated a tainted device must
tolerate it) read them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from accel_plugins.plugin.device import Device


@runtime_checkable
class DraTaintKeyer(Protocol):
    """Backend capability: the taint key for an Unhealthy device, or None for the default.

    The key must be a label name (an optional DNS-subdomain prefix and ``/``,
    then at most 63 characters). Called on the event loop for every Unhealthy
    device of every tree: answer from ``device.reason``.
    """

    def dra_taint_key(self, resource: str, device: Device) -> str | None: ...


EFFECT = "NoSchedule"  # running pods keep their device; NoExecute would evict them
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


@dataclass(frozen=True, slots=True)
class TaintId:
    """What identifies a device taint to a toleration."""

    key: str
    value: str
    effect: str = EFFECT


def taint_of(driver: str, keyer: DraTaintKeyer | None, resource: str, device: Device) -> TaintId:
    """The taint the driver's slices give an Unhealthy ``device``."""
    key = keyer.dra_taint_key(resource, device) if keyer is not None else None
    return TaintId(key or f"{driver}/{DEFAULT_KEY_NAME}", reason_value(device))


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
        Equal (the default) the same value, any other operator nothing."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"
