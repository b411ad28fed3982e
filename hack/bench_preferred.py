"""Benchmark section ``preferred``: NVIDIA GetPreferredAllocation, in process.

Each call is ``NvidiaBackend.preferred_allocation`` with Device objects, as
the servicer makes it (validation, mapping devices to GPUs, the exact
search). Requests cover every size, with and without must-include GPUs, on
random sets of free GPUs (seeded).

- warm: one backend answers every call, as a running plugin does (its link
  matrix and memo live as long as the device set).
- cold: a fresh link matrix for every call, the cost of a first call.
- 8 GPUs: ``pcie-8gpu-nvlink-pairs``; goal p99 <= 1 ms.
- 16 GPUs: 8 NVLink pairs, two pairs per PCIe switch, two switches per NUMA
  node; goal: the slowest call <= 50 ms (max, not p99).
- 16 GPUs with pairs of four different NVLink widths (less symmetry),
  informational.
- The brute-force reference (tests/support/best_effort_reference.py) on the 8-GPU
  requests, informational, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "hack"):  # also runs on its own: python hack/bench_preferred.py
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from benchlib import Row, percentile  # noqa: E402

from accel_plugins.backends.nvidia.allocation.pair_score import link_score  # noqa: E402
from accel_plugins.backends.nvidia.backend import NvidiaBackend  # noqa: E402
from accel_plugins.backends.nvidia.config.config import NvidiaSettings  # noqa: E402
from accel_plugins.backends.nvidia.container_contract import generated_mig_minors  # noqa: E402
from accel_plugins.backends.nvidia.facts import gpu_facts  # noqa: E402
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile  # noqa: E402
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml  # noqa: E402
from accel_plugins.backends.nvidia.simulate.simulated_profile import parse_profile  # noqa: E402
from accel_plugins.plugin.device import Device  # noqa: E402
from tests.support.best_effort_reference import best_effort  # noqa: E402

GPU = "nvidia.com/gpu"
GOAL_8_MS = 1.0
GOAL_16_MS = 50.0

Request = tuple[list[int], list[int], int]


def sixteen(nvlinks: Callable[[int], int]) -> dict[str, Any]:
    """A 16-GPU simulated node: pair p bridged by ``nvlinks(p)`` links."""

    def token(i: int, j: int) -> str:
        if i == j:
            return "X"
        if i // 2 == j // 2:
            return f"NV{nvlinks(i // 2)}+PIX"
        if i // 4 == j // 4:
            return "PIX"
        return "NODE" if i // 8 == j // 8 else "SYS"

    return {
        "gpus": [
            {
                "name": "NVIDIA H100 NVL",
                "memoryMiB": 95830,
                "pciBusId": f"0000:{16 + i:02x}:00.0",
                "numaNode": i // 8,
            }
            for i in range(16)
        ],
        "topology": [[token(i, j) for j in range(16)] for i in range(16)],
    }


def backend_for(profile: str | dict[str, Any]) -> tuple[NvidiaBackend, list[Device]]:
    node = (
        load_profile(profile)
        if isinstance(profile, str)
        else parse_profile(profile, name="bench", source="bench")
    )
    backend = NvidiaBackend(
        SimulatedNvml(node), NvidiaSettings(), mig_minors=generated_mig_minors(len(node.gpus))
    )
    devices = backend.build(backend.check())[GPU]
    return backend, sorted(devices, key=lambda d: gpu_facts(d).gpu_index)


def requests(gpus: int, per_size: int, seed: int) -> list[Request]:
    """For every size: all GPUs free, and ``per_size`` random requests, half with must-include."""
    rng = random.Random(seed)
    out: list[Request] = []
    for size in range(1, gpus + 1):
        # Every GPU free is the largest search: always in, with and without must-include.
        out.append((list(range(gpus)), [], size))
        out.append((list(range(gpus)), sorted(rng.sample(range(gpus), min(size, 2))), size))
        for k in range(per_size):
            free = sorted(rng.sample(range(gpus), rng.randint(size, gpus)))
            must = sorted(rng.sample(free, rng.randint(1, min(size, 2)))) if k % 2 else []
            out.append((free, must, size))
    rng.shuffle(out)
    return out


def timed_calls(
    backend: NvidiaBackend, devices: Sequence[Device], asks: Sequence[Request], *, cold: bool
) -> list[float]:
    samples = []
    for free, must, size in asks:
        available = [devices[i] for i in free]
        required = [devices[i] for i in must]
        if cold:
            backend.build(backend.check())  # a new link matrix: nothing memoised
        start = time.perf_counter()
        backend.preferred_allocation(GPU, available, required, size)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def brute_force_ms(asks: Sequence[Request], budget_s: float) -> list[float]:
    node = load_profile("pcie-8gpu-nvlink-pairs")
    weights = [
        [0 if i == j else link_score(t) for j, t in enumerate(r)]
        for i, r in enumerate(node.topology)
    ]
    numa = [g.numa_node for g in node.gpus]
    samples = []
    deadline = time.perf_counter() + budget_s
    for free, must, size in asks:
        start = time.perf_counter()
        best_effort(weights, free, must, size, numa)
        samples.append((time.perf_counter() - start) * 1000)
        if time.perf_counter() > deadline:
            break
    return samples


def rows_for(
    label: str, samples: list[float], *, goal_ms: float | None, on_max: bool = False
) -> list[Row]:
    p99 = percentile(samples, 99)
    worst = max(samples)
    judged = worst if on_max else p99
    n = len(samples)
    return [
        Row(f"preferred {label} p50 ({n} calls)", statistics.median(samples), "ms", "", None),
        Row(
            f"preferred {label} p99",
            p99,
            "ms",
            f"<= {goal_ms:g} ms" if goal_ms is not None and not on_max else "",
            (p99 <= goal_ms) if goal_ms is not None and not on_max else None,
        ),
        Row(
            f"preferred {label} max",
            worst,
            "ms",
            f"<= {goal_ms:g} ms" if goal_ms is not None and on_max else "",
            (judged <= goal_ms) if goal_ms is not None and on_max else None,
        ),
    ]


async def bench_preferred(args: argparse.Namespace, workdir: Path) -> list[Row]:
    quick = bool(getattr(args, "quick", False))
    rows: list[Row] = []

    backend, devices = backend_for("pcie-8gpu-nvlink-pairs")
    asks8 = requests(8, 40 if quick else 250, seed=8)
    timed_calls(backend, devices, asks8[:50], cold=False)  # imports and first-call effects
    rows += rows_for(
        "8 GPUs warm", timed_calls(backend, devices, asks8, cold=False), goal_ms=GOAL_8_MS
    )
    cold8 = asks8[: 200 if quick else 1000]
    rows += rows_for(
        "8 GPUs cold", timed_calls(backend, devices, cold8, cold=True), goal_ms=GOAL_8_MS
    )
    brute = brute_force_ms(asks8[: 100 if quick else 400], budget_s=5 if quick else 20)
    rows += rows_for("8 GPUs brute force", brute, goal_ms=None)

    backend, devices = backend_for(sixteen(lambda pair: 12))
    asks16 = requests(16, 4 if quick else 20, seed=16)
    rows += rows_for(
        "16 GPUs warm",
        timed_calls(backend, devices, asks16, cold=False),
        goal_ms=GOAL_16_MS,
        on_max=True,
    )
    rows += rows_for(
        "16 GPUs cold",
        timed_calls(backend, devices, asks16, cold=True),
        goal_ms=GOAL_16_MS,
        on_max=True,
    )

    backend, devices = backend_for(sixteen(lambda pair: (12, 8, 4, 2)[pair % 4]))
    asks_mixed = requests(16, 2 if quick else 6, seed=17)
    rows += rows_for(
        "16 GPUs mixed NVLink cold",
        timed_calls(backend, devices, asks_mixed, cold=True),
        goal_ms=None,
    )
    return rows


def main() -> None:
    """Run this section alone: ``python hack/bench_preferred.py [--quick]``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(bench_preferred(args, Path(tmp)))
    for row in rows:
        print(f"{row.name:<45} {row.value:10.3f} {row.unit:<3} {row.goal:<10} {row.status()}")


if __name__ == "__main__":
    main()
