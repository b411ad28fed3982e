"""Device taints for Unhealthy devices (KEP-5055, ``DRADeviceTaints``).

An Unhealthy device stays in the slice with a taint, so the scheduler keeps
new claims off it while the device and its allocations stay visible: key
``<driver>/unhealthy`` (or the backend's vendor key, DraTaintKeyer), value the
device's :class:`~accel_plugins.plugin.health_reason.HealthReason` made a label
value, effect ``NoSchedule`` (running pods keep their device; NoExecute would
evict them). Healthy again: the taint is gone.

The API server keeps the field only where the gate is on (alpha in 1.33-1.35,
beta in 1.36); elsewhere it drops it without an error, so ``auto`` asks the API
server once (a dry-run create) and, where dropped, leaves Unhealthy devices
out of the pool instead, as before. Validation facts from kubernetes/kubernetes
pkg/apis/resource/validation/validation.go (``validateDeviceTaint``: the key a
label name, the value a label value, effect NoSchedule or NoExecute).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable

from lightkube.models.resource_v1 import DeviceTaint

from accel_plugins.plugin.device import Device
from accel_plugins.plugin.dra_taints import DraTaintKeyer

EFFECT = "NoSchedule"
DEFAULT_KEY_NAME = "unhealthy"
NO_REASON = "unknown"
MAX_LABEL_VALUE = 63
_NOT_VALUE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
_EDGES = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")

Taint = Callable[[str, Device], DeviceTaint]


class TaintMode(enum.StrEnum):
    """``--dra-device-taints``: where Unhealthy devices get a taint."""

    AUTO = "auto"  # where the API server keeps the field (asked once at start)
    ON = "on"
    OFF = "off"


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value: [A-Za-z0-9_.-], alphanumeric ends, <= 63."""
    value = _NOT_VALUE_CHARS.sub("-", text)[:MAX_LABEL_VALUE]
    return _EDGES.sub("", value)


def reason_value(device: Device) -> str:
    """The taint value: the device's reason ("xid 79: fell off" -> "xid-79-fell-off")."""
    return label_value(str(device.reason)) if device.reason is not None else NO_REASON


def taint_maker(driver: str, keyer: DraTaintKeyer | None = None) -> Taint:
    """The taint of an Unhealthy device of ``driver`` (the backend's key when it has one)."""
    default = f"{driver}/{DEFAULT_KEY_NAME}"

    def taint(resource: str, device: Device) -> DeviceTaint:
        key = keyer.dra_taint_key(resource, device) if keyer is not None else None
        return DeviceTaint(key=key or default, value=reason_value(device), effect=EFFECT)

    return taint
