"""What every benchmark section of ``hack/bench`` returns: rows with a goal beside the result.

A section is ``async def bench_<name>(args, workdir) -> list[Row]``; ``args`` has
``quick`` (fewer rounds) and the scratch ``workdir`` is removed afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Row:
    name: str
    value: float
    unit: str
    goal: str
    ok: bool | None  # None: informational, no goal

    def status(self) -> str:
        return "" if self.ok is None else ("ok" if self.ok else "MISS")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]
