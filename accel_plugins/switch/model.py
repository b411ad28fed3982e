"""What keeps a plugin from publishing in its mode: the other mode's devices and sockets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["device-plugin", "dra"]
MODES: tuple[Mode, ...] = ("device-plugin", "dra")


def other(mode: Mode) -> Mode:
    return "dra" if mode == "device-plugin" else "device-plugin"


@dataclass(frozen=True)
class HeldDevice:
    """A device the other mode still has allocated: by a pod (device plugin, from
    PodResources) or by a prepared claim (DRA, from the driver's checkpoint)."""

    holder: str  # "namespace/pod" or "namespace/claim"
    resource: str  # the resource name, or the DRA driver's name
    device: str

    def __str__(self) -> str:
        return f"{self.holder}: {self.resource} {self.device}"


@dataclass(frozen=True)
class Blockers:
    """The other mode's state on this node, as last read."""

    held: tuple[HeldDevice, ...] = ()
    advertised: tuple[str, ...] = ()  # live sockets or non-empty slices, by name

    @property
    def clear(self) -> bool:
        return not self.held and not self.advertised

    def describe(self) -> str:
        parts = []
        if self.held:
            parts.append(
                f"{len(self.held)} device(s) still allocated ({', '.join(map(str, self.held))})"
            )
        if self.advertised:
            parts.append(f"still advertised: {', '.join(self.advertised)}")
        return "; ".join(parts) or "nothing"


@dataclass(frozen=True)
class SwitchSettings:
    """``--kubelet-api-switch-label`` and ``--kubelet-api-default``."""

    label: str
    default: Mode = "device-plugin"

    def mode_of(self, labels: dict[str, str] | None) -> Mode | None:
        """The mode a node with ``labels`` is in; None for a value naming no mode (the
        chart then runs neither DaemonSet there)."""
        value = (labels or {}).get(self.label)
        if value is None:
            return self.default
        for mode in MODES:
            if value == mode:
                return mode
        return None

    def switching_away(self, labels: dict[str, str] | None, mine: Mode) -> bool:
        """Whether a plugin in ``mine`` stops because the node was relabelled (a switch),
        not because its pod is replaced (an upgrade, a drain): the label, read at SIGTERM,
        no longer names our mode."""
        return self.mode_of(labels) != mine
