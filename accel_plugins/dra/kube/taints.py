"""Device taints for Unhealthy devices (KEP-5055, ``DRADeviceTaints``).

An Unhealthy device stays in the slice with a taint, so the scheduler keeps
new claims off it while the device and its allocations stay visible: key
``<driver>/unhealthy`` (or the backend's vendor key, DraTaintKeyer), value the
device's :class:`~accel_plugins.plugin.health_reason.HealthReason` made a label
value, effect by reason (plugin/dra_taints.py ``effect_of``): ``None`` for an
informational reason (``unmonitored``, an XID NVIDIA does not treat as fatal),
``NoSchedule`` for the rest (running pods keep their device; NoExecute would
evict them). Healthy again: the taint is gone.

The API server keeps the field only where the gate is on (alpha in 1.33-1.35,
beta in 1.36); elsewhere it drops it without an error, so ``auto`` asks the API
server once (a dry-run create) and, where dropped, leaves Unhealthy devices
out of the pool instead, as before. Validation facts from kubernetes/kubernetes
pkg/apis/resource/validation/validation.go (``validateDeviceTaint``: the key a
label name, the value a label value, effect NoSchedule or NoExecute, and from
1.35 None). Effect None is refused where it is not known: a 1.33 or 1.34 API
server with the gate on answers 422 ``Unsupported value: "None": supported
values: "NoExecute", "NoSchedule"`` (measured with ../shared/k8s's v1.33.13 and
v1.34.9; v1.36.2 keeps it; with the gate off it is dropped with the rest of the
taints, before validation). So gates.py asks with a dry-run too, and where None
is refused informational reasons get ``NoSchedule``, as every reason did before.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from lightkube.models.resource_v1 import DeviceTaint

from accel_plugins.plugin.device import Device
from accel_plugins.plugin.dra_taints import (
    DEFAULT_KEY_NAME,
    EFFECT,
    INFORMATIONAL_EFFECT,
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
    "INFORMATIONAL_EFFECT",
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


def taint_maker(
    driver: str, keyer: DraTaintKeyer | None = None, *, informational: bool = True
) -> Taint:
    """The taint of an Unhealthy device of ``driver`` (the backend's key when it has one);
    ``informational`` False where the API server refuses effect None (NoSchedule then)."""

    def taint(resource: str, device: Device) -> DeviceTaint:
        found = taint_of(driver, keyer, resource, device, informational=informational)
        return DeviceTaint(key=found.key, value=found.value, effect=found.effect)

    return taint
