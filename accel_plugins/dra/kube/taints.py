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
from collections.abc import Callable

from lightkube.models.resource_v1 import DeviceTaint

from accel_plugins.plugin.device import Device
from accel_plugins.plugin.dra_taints import (
    DEFAULT_KEY_NAME,
    EFFECT,
    MAX_LABEL_VALUE,
    NO_REASON,
    DraTaintKeyer,
    label_value,
    reason_value,
    taint_of,
)

__all__ = [
    "DEFAULT_KEY_NAME",
    "EFFECT",
    "MAX_LABEL_VALUE",
    "NO_REASON",
    "Taint",
    "TaintMode",
    "label_value",
    "reason_value",
    "taint_maker",
]

Taint = Callable[[str, Device], DeviceTaint]


class TaintMode(enum.StrEnum):
    """``--dra-device-taints``: where Unhealthy devices get a taint."""

    AUTO = "auto"  # where the API server keeps the field (asked once at start)
    ON = "on"
    OFF = "off"


def taint_maker(driver: str, keyer: DraTaintKeyer | None = None) -> Taint:
    """The taint of an Unhealthy device of ``driver`` (the backend's key when it has one)."""

    def taint(resource: str, device: Device) -> DeviceTaint:
        found = taint_of(driver, keyer, resource, device)
        return DeviceTaint(key=found.key, value=found.value, effect=found.effect)

    return taint
