"""NVIDIA's pair score: how well two GPUs are connected, and the node's matrix of them.

This is the score of NVIDIA's best-effort allocator (go-gpuallocator, the
policy behind NVIDIA's device plugin's GetPreferredAllocation). Every pair of
GPUs has two facts, read from NVML as NVIDIA reads them (``discovery.py``):

- its **PCIe relation**, from ``nvmlDeviceGetTopologyCommonAncestor``:
  ``BOARD`` (one board, NVML's "internal") 60, ``PIX`` (one PCIe switch) 50,
  ``PXB`` (several switches) 40, ``PHB`` (a host bridge) 30, ``NODE`` (host
  bridges on one NUMA node) 20, ``SYS`` (across NUMA nodes; ``SOC`` is its
  old name) 10;
- its **direct NVLinks**: the active links of one GPU whose remote PCI
  device (``nvmlDeviceGetNvLinkRemotePciInfo_v2``) is the other GPU, 100
  each. A link into an NVSwitch is not a link to a GPU and counts nothing.

The pair scores the sum: an NVLink pair under one PCIe switch 150, the same
pair across a host bridge 130. A group of GPUs scores the sum of its pairs.

Tokens write the two facts the way ``nvidia-smi topo -m`` writes one:
``NV2+SYS`` (two NVLinks, across NUMA nodes), ``PIX`` (no NVLink). A bare
``NV2`` leaves the PCIe relation unknown (it scores its links only); simulated
profiles fill it in from the GPUs' NUMA nodes (``simulate.py``).

:class:`LinkMatrix` is built once per device set (when the backend builds its
resources) and keeps the exact search (:mod:`.best_effort_search`) with its
memo, so no call recomputes the topology.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accel_plugins.backends.nvidia.nvml import (
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
)

if TYPE_CHECKING:
    from accel_plugins.backends.nvidia.discovery import Gpu

NVLINK_SCORE = 100
PCIE_SCORES: Mapping[str, int] = {
    "BOARD": 60,
    "PIX": 50,
    "PXB": 40,
    "PHB": 30,
    "NODE": 20,
    "SYS": 10,
}
_PCIE_ALIASES = {"SOC": "SYS"}

# NVML's common-ancestor levels and the relation each one names (NVIDIA's mapping).
PCIE_OF_LEVEL: Mapping[int, str] = {
    TOPOLOGY_INTERNAL: "BOARD",
    TOPOLOGY_SINGLE: "PIX",
    TOPOLOGY_MULTIPLE: "PXB",
    TOPOLOGY_HOSTBRIDGE: "PHB",
    TOPOLOGY_NODE: "NODE",
    TOPOLOGY_SYSTEM: "SYS",
}
LEVEL_OF_PCIE: Mapping[str, int] = {relation: level for level, relation in PCIE_OF_LEVEL.items()}

_NV = re.compile(r"^NV([1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class PairLink:
    """The two facts of a GPU pair: direct NVLinks and the PCIe relation (None: unknown)."""

    nvlinks: int = 0
    pcie: str | None = None

    @property
    def score(self) -> int:
        """NVIDIA's pair score."""
        return NVLINK_SCORE * self.nvlinks + PCIE_SCORES.get(self.pcie or "", 0)

    @property
    def token(self) -> str:
        """``NV2+SYS``, ``PIX``, ``NV2`` (relation unknown), ``?`` (nothing known)."""
        if self.nvlinks and self.pcie:
            return f"NV{self.nvlinks}+{self.pcie}"
        if self.nvlinks:
            return f"NV{self.nvlinks}"
        return self.pcie or "?"


def parse_link(token: str) -> PairLink | None:
    """The facts a token states; None for anything that is not a pair token ("X", typos).

    Accepted: ``NV<n>+<relation>``, ``NV<n>``, ``<relation>`` and ``?`` (nothing
    known), where the relation is one of ``BOARD PIX PXB PHB NODE SYS``
    (``SOC`` reads as ``SYS``) and ``n`` is at least 1.
    """
    if token == "?":
        return PairLink()
    head, plus, tail = token.partition("+")
    links = _NV.match(head)
    if plus:
        relation = _relation(tail)
        if links is None or relation is None:
            return None
        return PairLink(nvlinks=int(links.group(1)), pcie=relation)
    if links is not None:
        return PairLink(nvlinks=int(links.group(1)))
    relation = _relation(token)
    return None if relation is None else PairLink(pcie=relation)


def _relation(text: str) -> str | None:
    relation = _PCIE_ALIASES.get(text, text)
    return relation if relation in PCIE_SCORES else None


def link_score(token: str) -> int:
    """NVIDIA's pair score of one token (0 for the diagonal "X" and for unknown tokens)."""
    link = parse_link(token)
    return 0 if link is None else link.score


class LinkMatrix:
    """Pair scores between GPUs, addressed by GPU index, and the search over them.

    ``rows`` maps a GPU index to its row of tokens and the GPU index of each
    entry (a GPU's ``links`` and ``peers``). A pair scores the better of its
    two entries, so the matrix is symmetric even if a row is not. ``numa``
    gives each GPU's NUMA node (None: unknown) for the search's tie-break.
    """

    def __init__(
        self,
        rows: Mapping[int, tuple[Sequence[str], Sequence[int]]],
        numa: Mapping[int, int | None] | None = None,
    ) -> None:
        self.gpus: tuple[int, ...] = tuple(sorted(rows))
        self._position = {gpu: p for p, gpu in enumerate(self.gpus)}
        n = len(self.gpus)
        weights = [[0] * n for _ in range(n)]
        for gpu, (links, peers) in rows.items():
            p = self._position[gpu]
            for token, peer in zip(links, peers, strict=False):
                q = self._position.get(peer)
                if q is None or q == p:
                    continue
                score = link_score(token)
                if score > weights[p][q]:
                    weights[p][q] = weights[q][p] = score
        self.weights: tuple[tuple[int, ...], ...] = tuple(tuple(row) for row in weights)
        nodes = numa or {}
        # The search loads with the first matrix, not with discovery's link tables above.
        from accel_plugins.backends.nvidia.allocation.best_effort_search import Partitioner

        self.partitioner = Partitioner(self.weights, numa=[nodes.get(g) for g in self.gpus])

    @classmethod
    def from_gpus(cls, gpus: Iterable[Gpu]) -> LinkMatrix:
        listed = list(gpus)
        return cls(
            {g.index: (g.links, g.peers) for g in listed}, {g.index: g.numa_node for g in listed}
        )

    def __contains__(self, gpu: object) -> bool:
        return gpu in self._position

    def score(self, a: int, b: int) -> int:
        """The pair score of GPUs ``a`` and ``b`` (0 for one the matrix does not know)."""
        p = self._position.get(a)
        q = self._position.get(b)
        if p is None or q is None:
            return 0
        return self.weights[p][q]

    def choose(self, available: Iterable[int], must: Iterable[int], size: int) -> list[int]:
        """The best ``size`` GPU indices (see :mod:`.best_effort_search`), lowest first.

        ValueError for an index the matrix does not know or an impossible request.
        """
        from accel_plugins.backends.nvidia.allocation.best_effort_search import mask_of, positions

        try:
            free = mask_of([self._position[g] for g in available])
            required = mask_of([self._position[g] for g in must])
        except KeyError as exc:
            raise ValueError(f"GPU {exc.args[0]} is not in the link matrix") from None
        chosen = self.partitioner.choose(free, required, size)
        return [self.gpus[p] for p in positions(chosen)]
