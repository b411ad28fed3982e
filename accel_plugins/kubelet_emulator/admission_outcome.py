"""An admission's outcome, as data (``to_dict``) and as text for a terminal.

Per pod whether it was admitted (or the kubelet's reason and message), and per
container its topology hints, NUMA affinity, the devices each resource got
with where they came from, the Allocate response and the PreStartContainer
calls made at start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from accel_plugins.kubelet_emulator.device_choice import Choice
from accel_plugins.kubelet_emulator.model import ContainerResponse
from accel_plugins.kubelet_emulator.podspec import ContainerSpec, PodSpec
from accel_plugins.kubelet_emulator.topology import TopologyHint, format_nodes

Hints = Mapping[str, tuple[TopologyHint, ...] | None]


@dataclass(frozen=True, slots=True)
class Grant:
    """What one container got of one resource."""

    resource: str
    device_ids: tuple[str, ...]
    response: ContainerResponse
    choice: Choice | None = None  # None: the container already held them (no Allocate call)

    def to_dict(self) -> dict[str, object]:
        choice = self.choice
        asked = choice.preferred if choice is not None else None
        return {
            "resource": self.resource,
            "device_ids": list(self.device_ids),
            "already_held": choice is None,
            "steps": [[s, list(ids)] for s, ids in choice.steps] if choice else [],
            "preferred_allocation": None
            if asked is None
            else {
                "available": list(asked.available),
                "must_include": list(asked.must_include),
                "size": asked.size,
                "answer": list(asked.answer),
            },
            "response": self.response.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class PreStart:
    """One PreStartContainer call at container start; ``error`` None when it succeeded."""

    resource: str
    device_ids: tuple[str, ...]
    error: str | None = None


def _no_hints() -> Hints:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ContainerAdmission:
    """One container: its hints, NUMA affinity, devices and (once started) PreStartContainer."""

    container: ContainerSpec
    hints: Hints = field(default_factory=_no_hints, hash=False)
    affinity: TopologyHint | None = None  # None: no hints computed (policy none)
    grants: tuple[Grant, ...] = ()
    pre_starts: tuple[PreStart, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.container.name,
            "kind": self.container.kind,
            "hints": {
                r: None if h is None else [x.to_dict() for x in h] for r, h in self.hints.items()
            },
            "affinity": None if self.affinity is None else self.affinity.to_dict(),
            "grants": [g.to_dict() for g in self.grants],
            "pre_start": [
                {"resource": p.resource, "device_ids": list(p.device_ids), "error": p.error}
                for p in self.pre_starts
            ],
        }


@dataclass(frozen=True, slots=True)
class Admission:
    """The outcome for one pod; ``reason`` is empty when it was admitted."""

    pod: PodSpec
    policy: str
    numa_nodes: tuple[int, ...]
    containers: tuple[ContainerAdmission, ...] = ()
    reason: str = ""
    message: str = ""

    @property
    def admitted(self) -> bool:
        return not self.reason

    @property
    def started(self) -> bool:
        """Admitted, and every PreStartContainer call succeeded."""
        return self.admitted and all(p.error is None for c in self.containers for p in c.pre_starts)

    def to_dict(self) -> dict[str, object]:
        return {
            "pod": self.pod.key,
            "admitted": self.admitted,
            "started": self.started,
            "reason": self.reason,
            "message": self.message,
            "policy": self.policy,
            "numa_nodes": list(self.numa_nodes),
            "containers": [c.to_dict() for c in self.containers],
        }


def _hints_text(hints: tuple[TopologyHint, ...] | None) -> str:
    if hints is None:
        return "no preference (its devices report no NUMA node)"
    if not hints:
        return "none possible"
    return ", ".join(
        format_nodes(h.affinity) + (" (preferred)" if h.preferred else "") for h in hints
    )


def _items(title: str, items: Sequence[str], indent: str) -> list[str]:
    if not items:
        return []
    return [f"{indent}{title}:"] + [f"{indent}  {item}" for item in items]


def response_lines(response: ContainerResponse, indent: str) -> list[str]:
    """What the runtime sets up for the container, the empty parts left out."""
    specs = [
        f"{d.host_path} -> {d.container_path} ({d.permissions or 'no permissions'})"
        for d in response.devices
    ]
    mounts = [
        f"{m.host_path} -> {m.container_path}{' (read-only)' if m.read_only else ''}"
        for m in response.mounts
    ]
    lines = [
        *_items("device specs", specs, indent),
        *_items("mounts", mounts, indent),
        *_items("envs", [f"{k}={v}" for k, v in sorted(response.envs.items())], indent),
        *_items(
            "annotations", [f"{k}={v}" for k, v in sorted(response.annotations.items())], indent
        ),
        *_items("CDI devices", list(response.cdi_devices), indent),
    ]
    return lines or [f"{indent}(empty response)"]


_SOURCES = {
    "reused": "reused from the init containers",
    "preferred": "preferred by the plugin",
    "aligned": "on the affinity's NUMA nodes",
    "unaligned": "off the affinity's NUMA nodes",
    "any": "the kubelet's pick",
}


def _grant_lines(grant: Grant) -> list[str]:
    lines = [f"    {grant.resource}: {', '.join(grant.device_ids)}"]
    choice = grant.choice
    if choice is None:
        lines.append("      already held by the container (no Allocate call)")
    else:
        lines += [f"      {', '.join(ids)}: {_SOURCES[s]}" for s, ids in choice.steps]
        asked = choice.preferred
        if asked is not None:
            must = ", ".join(asked.must_include) or "-"
            lines.append(
                f"      GetPreferredAllocation(available {', '.join(asked.available)}; "
                f"must include {must}; size {asked.size}) -> {', '.join(asked.answer) or '-'}"
            )
            if asked.ignored:
                lines.append(f"      ignored, not offered: {', '.join(asked.ignored)}")
    return lines + response_lines(grant.response, "      ")


def render_admission(outcome: Admission) -> str:
    """The outcome for a terminal: per container the NUMA affinity, devices and response."""
    pod = outcome.pod
    where = f"topology policy {outcome.policy}, NUMA nodes {format_nodes(outcome.numa_nodes)}"
    if outcome.admitted:
        head = f"pod {pod.key}: admitted ({where})"
    else:
        head = f"pod {pod.key}: rejected: {outcome.reason}: {outcome.message} ({where})"
    lines = [head]
    for admitted in outcome.containers:
        lines.append(f"  {admitted.container.kind} {admitted.container.name}:")
        for resource, hints in admitted.hints.items():
            lines.append(f"    topology hints for {resource}: {_hints_text(hints)}")
        if admitted.affinity is not None:
            lines.append(f"    NUMA affinity: {admitted.affinity}")
        if not admitted.grants and not admitted.container.devices:
            lines.append("    no extended resources")
        for grant in admitted.grants:
            lines += _grant_lines(grant)
        for call in admitted.pre_starts:
            state = "ok" if call.error is None else f"failed: {call.error}"
            lines.append(
                f"    PreStartContainer {call.resource} ({', '.join(call.device_ids)}): {state}"
            )
    return "\n".join(lines)
