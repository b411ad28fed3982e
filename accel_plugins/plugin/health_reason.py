"""Why a device is Unhealthy: one small taxonomy every health channel reports.

A reason travels on the :class:`~accel_plugins.plugin.device.Device` itself, so
the one snapshot that says "Unhealthy" also says why, and every consumer
(ListAndWatch, the DRA health stream, ResourceSlice taints, Node Events,
``/metrics``, ``inspect``) reads it from the same place. Backends set it; the
framework never invents one except ``unmonitored`` (the backend's health
source itself failed) and ``cordoned`` (an operator took the device out).

A reason is *informational* when it does not by itself say the device is broken:
its kind is in :data:`INFORMATIONAL_KINDS` (``unmonitored``: health is unknown),
or the backend built it with ``fatal=False`` (an XID NVIDIA's catalogue does not
treat as fatal). The device is still Unhealthy in every channel; only its DRA
device taint differs (effect ``None``, not ``NoSchedule``: plugin/dra_taints.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ReasonKind(enum.StrEnum):
    """The kinds of reason, as they appear in metrics labels and taint values."""

    XID = "xid"  # an NVIDIA XID error event (code = the XID number)
    ECC = "ecc"  # uncorrectable ECC errors / retired pages pending
    GPU_LOST = "gpu-lost"  # the GPU no longer answers (fallen off the bus, NVML lost it)
    NODE_VANISHED = "node-vanished"  # a /dev node the device needs is gone
    UNREADABLE = "unreadable"  # the node exists but cannot be opened or read
    UNMONITORED = "unmonitored"  # the health source failed, so health is unknown
    CORDONED = "cordoned"  # taken out of service by an operator
    OTHER = "other"  # a backend's own reason outside the taxonomy (detail says it)


# Kinds that say nothing is known to be wrong with the device itself.
INFORMATIONAL_KINDS: frozenset[ReasonKind] = frozenset({ReasonKind.UNMONITORED})


@dataclass(frozen=True, slots=True)
class HealthReason:
    """A reason: its kind, an optional code (the XID number) and a human detail.

    ``fatal`` is False for an event the backend reports although its vendor does
    not treat it as a fault of the device (see :attr:`informational`).
    """

    kind: ReasonKind
    detail: str = ""
    code: int | None = None
    fatal: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ReasonKind(self.kind))

    @property
    def informational(self) -> bool:
        """True where the reason does not by itself say the device is broken."""
        return not self.fatal or self.kind in INFORMATIONAL_KINDS

    def __str__(self) -> str:
        head = self.kind.value if self.code is None else f"{self.kind.value} {self.code}"
        return f"{head}: {self.detail}" if self.detail else head
