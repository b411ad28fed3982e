"""Pair scores between a node's GPUs, from the nvidia-smi topology tokens.

``NV<n>`` (n NVLinks) scores ``100 * n``; without NVLink the PCIe path
decides: ``PIX`` 50 (one switch), ``PXB`` 40 (several switches), ``PHB`` 30
(the host bridge), ``NODE`` 20 (host bridges on one NUMA node), ``SYS`` 10
(across NUMA nodes; ``SOC`` is its old name). Anything else scores 0.

:class:`LinkMatrix` is built once per device set (when the backend builds its
resources) and keeps the exact whole-GPU search with its memo, so no call
recomputes the topology.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from accel_plugins.backends.nvidia.discovery import Gpu
from accel_plugins.backends.nvidia.partition import Partitioner, mask_of, positions

NVLINK_SCORE = 100
LEVEL_SCORES: Mapping[str, int] = {
    "PIX": 50,
    "PXB": 40,
    "PHB": 30,
    "NODE": 20,
    "SYS": 10,
    "SOC": 10,
}


def link_score(token: str) -> int:
    """The pair score of one topology token."""
    if token.startswith("NV") and token[2:].isdigit():
        return NVLINK_SCORE * int(token[2:])
    return LEVEL_SCORES.get(token, 0)


class LinkMatrix:
    """Pair scores between GPUs, addressed by GPU index.

    ``rows`` maps a GPU index to its row of tokens and the GPU index of each
    entry (a GPU's ``links`` and ``peers``). A pair scores the better of its
    two entries, so the matrix is symmetric even if a row is not.
    """

    def __init__(self, rows: Mapping[int, tuple[Sequence[str], Sequence[int]]]) -> None:
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
        self.partitioner = Partitioner(self.weights)

    @classmethod
    def from_gpus(cls, gpus: Iterable[Gpu]) -> LinkMatrix:
        return cls({g.index: (g.links, g.peers) for g in gpus})

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
        """The best ``size`` GPU indices (see :mod:`.partition`), lowest first.

        ValueError for an index the matrix does not know or an impossible request.
        """
        try:
            free = mask_of([self._position[g] for g in available])
            required = mask_of([self._position[g] for g in must])
        except KeyError as exc:
            raise ValueError(f"GPU {exc.args[0]} is not in the link matrix") from None
        chosen = self.partitioner.choose(free, required, size)
        return [self.gpus[p] for p in positions(chosen)]
