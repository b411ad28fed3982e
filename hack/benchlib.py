"""What every benchmark section of ``hack/bench`` returns: rows with a goal beside the result.

A section is ``async def bench_<name>(args, workdir) -> list[Row]``; ``args`` has
``quick`` (fewer rounds) and the scratch ``workdir`` is removed afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid``, in nanosecond resolution (schedstat),
    where /proc/<pid>/stat's clock ticks would make a 5 s idle window read 0 or 0.2 %."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended between listing and reading
    return total / 1e9


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")
