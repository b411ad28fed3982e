"""The node labels NVIDIA's gpu-feature-discovery (GFD) writes, from what NVML tells us.

Names and value formats are GFD's (k8s-device-plugin ``internal/lm``:
``nvml.go`` for versions and MIG capability, ``resource.go`` for the
per-resource labels, ``mig-strategy.go`` and ``strategy.go`` for MIG), so
node selectors written for GFD select the same nodes. Left out, because NVML
as this plugin reads it does not say: ``gpu.machine`` (a DMI file),
``gpu.mode`` (the PCI class), the MIG engine and multiprocessor counts,
vGPU and IMEX labels, and ``gfd.timestamp`` (it would rewrite the file for
nothing every time).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from accel_plugins.backends.nvidia.config.config import TimeSlicing
from accel_plugins.backends.nvidia.discovery import Gpu, MigDevice, Node

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")
_SLICES = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.")


@dataclass(frozen=True, slots=True)
class LabelFacts:
    """What the labels need beyond discovery: versions and per-GPU capabilities.

    ``cuda_driver_version`` is NVML's integer (12040 for CUDA 12.4);
    ``compute_capability`` maps GPU UUIDs to (major, minor), and
    ``mig_capable`` holds the UUIDs of GPUs that support MIG.
    """

    driver_version: str
    cuda_driver_version: int
    compute_capability: Mapping[str, tuple[int, int]] = field(default_factory=dict, hash=False)
    mig_capable: frozenset[str] = frozenset()


def sanitise(text: str) -> str:
    """GFD's product spelling: characters outside ``[A-Za-z0-9-_. ]`` dropped, spaces -> ``-``."""
    return "-".join(_UNSAFE.sub("", text).split())


def arch_family(major: int, minor: int) -> str:
    """GFD's ``getArchFamily``: the architecture of a CUDA compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    families = {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }
    return families.get(major, "undefined")


def version_labels(driver_version: str, cuda_driver_version: int) -> dict[str, str]:
    """Driver and CUDA versions, under GFD's old and new names (``newVersionLabeler``)."""
    parts = driver_version.split(".")
    if not 2 <= len(parts) <= 3:
        log.warning("driver version %r is not X.Y[.Z]: no version labels", driver_version)
        return {}
    major, minor = parts[0], parts[1]
    rev = parts[2] if len(parts) == 3 else ""
    cuda_major, cuda_minor = cuda_driver_version // 1000, cuda_driver_version % 1000 // 10
    return {
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime.major": str(cuda_major),
        "nvidia.com/cuda.runtime.minor": str(cuda_minor),
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": driver_version,
        "nvidia.com/cuda.runtime-version.major": str(cuda_major),
        "nvidia.com/cuda.runtime-version.minor": str(cuda_minor),
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
    }


@dataclass(frozen=True, slots=True)
class _Resource:
    """GFD's resourceLabeler: a resource name and its sharing (None: sharing does not apply)."""

    name: str
    sharing: TimeSlicing | None
    strategy: str = "time-slicing"  # or "mps": which section ``sharing`` came from

    def _replicated(self) -> tuple[int, bool] | None:
        """(replicas, renamed) of the config entry for this resource, if any."""
        if self.sharing is None:
            return None
        for entry in self.sharing.resources:
            if entry.name == self.name:
                return entry.replicas, entry.rename != entry.name
        return None

    @property
    def replicas(self) -> int:
        if self.sharing is None:
            return 0
        entry = self._replicated()
        return entry[0] if entry is not None and entry[0] > 0 else 1

    def product(self, *parts: str) -> str:
        words = [sanitise(p) for p in parts if p]
        entry = self._replicated()
        if entry is not None and entry[0] > 1 and not entry[1]:
            words.append("SHARED")  # a shared resource that keeps its name says so
        return "-".join(words)

    def base(self, count: int, *parts: str) -> dict[str, str]:
        replicas = self.replicas
        strategy = self.strategy if self.sharing is not None and replicas > 1 else "none"
        return {
            f"{self.name}.product": self.product(*parts),
            f"{self.name}.count": str(count),
            f"{self.name}.replicas": str(replicas),
            f"{self.name}.sharing-strategy": strategy,
        }


def _gpu_labels(gpu: Gpu, facts: LabelFacts, count: int, resource: _Resource) -> dict[str, str]:
    labels = resource.base(count, gpu.name)
    if gpu.memory_mib:
        labels[f"{GPU}.memory"] = str(gpu.memory_mib)
    major, minor = facts.compute_capability.get(gpu.uuid, (0, 0))
    if major:  # GFD leaves the architecture out when CUDA reports no capability
        labels[f"{GPU}.family"] = arch_family(major, minor)
        labels[f"{GPU}.compute.major"] = str(major)
        labels[f"{GPU}.compute.minor"] = str(minor)
    return labels


def _full_gpu_labels(node: Node, facts: LabelFacts, sharing: Sharing) -> dict[str, str]:
    """GFD's ``newGPULabelers``: one product per node, counted over every GPU of that name.

    A model with a GPU outside MIG mode carries the sharing config; one whose
    GPUs are all in MIG mode reports 0 replicas. With several models GFD's
    pick is Go's map order; ours is the most common model, then the first.
    """
    counts = Counter(g.name for g in node.gpus)
    if len(counts) > 1:
        log.warning("several GPU models on this node (%s): labelling the most common", counts)
    name = max(counts, key=lambda n: (counts[n], -min(g.index for g in node.gpus if g.name == n)))
    of_model = [g for g in node.gpus if g.name == name]
    whole = [g for g in of_model if not g.mig_enabled]
    if whole:
        return _gpu_labels(whole[0], facts, counts[name], sharing.of(GPU))
    return _gpu_labels(of_model[0], facts, counts[name], _Resource(GPU, None))


def _mig_labels(resource: _Resource, model: str, mig: MigDevice, count: int) -> dict[str, str]:
    labels = resource.base(count, model, "MIG", mig.profile)
    labels[f"{resource.name}.memory"] = str(mig.memory_mib)
    match = _SLICES.match(mig.profile)
    if match is not None:
        compute, gpu = match.groups()
        labels[f"{resource.name}.slices.gi"] = gpu
        labels[f"{resource.name}.slices.ci"] = compute or gpu
    return labels


def _invalid_single(model: str) -> dict[str, str]:
    """GFD's ``newInvalidMigStrategyLabeler``: a node mig-strategy=single cannot serve."""
    return {
        f"{GPU}.product": "-".join((sanitise(model), "MIG", "INVALID")),
        f"{GPU}.count": "0",
        f"{GPU}.replicas": "0",
        f"{GPU}.sharing-strategy": "",
        f"{GPU}.memory": "0",
    }


def _by_profile(gpus: Sequence[Gpu]) -> dict[str, tuple[str, MigDevice, int]]:
    """profile -> (parent model, first MIG device, how many) over every MIG device."""
    found: dict[str, tuple[str, MigDevice, int]] = {}
    for gpu in gpus:
        for mig in gpu.migs:
            model, first, n = found.get(mig.profile, (gpu.name, mig, 0))
            found[mig.profile] = (model, first, n + 1)
    return found


def _single_labels(node: Node, sharing: Sharing) -> dict[str, str]:
    enabled = [g for g in node.gpus if g.mig_enabled]
    if not enabled:
        return {}  # no MIG device: as with the none strategy
    model = enabled[0].name
    if any(not g.migs for g in enabled):
        return _invalid_single(model)  # a MIG-enabled GPU with no MIG device
    if len(enabled) != len(node.gpus):
        return _invalid_single(model)  # GPUs in and out of MIG mode
    profiles = _by_profile(enabled)
    if len(profiles) != 1:
        return _invalid_single(model)  # more than one MIG profile
    ((parent, mig, count),) = profiles.values()
    return _mig_labels(sharing.of(GPU), parent, mig, count)


def _mixed_labels(node: Node, sharing: Sharing) -> dict[str, str]:
    labels: dict[str, str] = {}
    for profile, (parent, mig, count) in sorted(_by_profile(node.gpus).items()):
        labels |= _mig_labels(sharing.of(f"nvidia.com/mig-{profile}"), parent, mig, count)
    return labels


@dataclass(frozen=True, slots=True)
class Sharing:
    """The config's sharing section: ``sharing.timeSlicing`` or ``sharing.mps``."""

    replicated: TimeSlicing = field(default_factory=TimeSlicing)
    mps: bool = False

    def of(self, resource: str) -> _Resource:
        return _Resource(resource, self.replicated, "mps" if self.mps else "time-slicing")


def node_labels(
    node: Node, facts: LabelFacts, *, mig_strategy: str, sharing: Sharing
) -> dict[str, str]:
    """Every label GFD would write for this node that NVML lets us know; {} without GPUs."""
    if not node.gpus:
        return {}
    labels = version_labels(facts.driver_version, facts.cuda_driver_version)
    capable = any(g.uuid in facts.mig_capable for g in node.gpus)
    labels["nvidia.com/mig.capable"] = str(capable).lower()
    # GFD's sharing labeler: MPS-capable when MPS is configured and no GPU is in MIG mode.
    mps = sharing.mps and not any(g.mig_enabled for g in node.gpus)
    labels["nvidia.com/mps.capable"] = str(mps).lower()
    labels |= _full_gpu_labels(node, facts, sharing)
    if mig_strategy != "none":
        labels["nvidia.com/mig.strategy"] = mig_strategy
    if mig_strategy == "single":
        labels |= _single_labels(node, sharing)
    elif mig_strategy == "mixed":
        labels |= _mixed_labels(node, sharing)
    return labels


def render(labels: Mapping[str, str]) -> str:
    """NFD's feature file format: one ``key=value`` per line, sorted so equal sets compare equal."""
    return "".join(f"{key}={value}\n" for key, value in sorted(labels.items()))
