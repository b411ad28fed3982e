"""Claim prepare over the DRA socket, beside the device-plugin path's admission.

``NodePrepareResources`` as the kubelet calls it (the emulator's DraClient on
the driver's ``dra.sock``), for one claim of one device: the driver resolves
the ResourceClaim, writes the claim's CDI spec and its checkpoint, and
answers; each round unprepares the claim after, so every prepare reads the
claim from the API server (one GET, loopback): the driver keeps no read and
watches no claim (issue 31). The first Prepare of a fresh driver is reported
apart. Beside it,
the device-plugin path for the same device: the emulator's Allocate through
the same framework (bench_admission), where no API server is involved.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench_admission import UNIFORM, Fixed, allocate_samples
from benchlib import Row, percentile

from accel_plugins.dra.driver import DraDriver, DraSettings
from accel_plugins.kubelet_emulator.dra import DraClaim, DraClient


async def prepare_samples(
    claims: Any, claim: DraClaim, *, driver: str, node: str, workdir: Path, rounds: int
) -> tuple[list[float], list[float]]:
    """Milliseconds per NodePrepareResources of ``claim`` (allocated device ``u0``), and per
    NodePrepareResources + NodeUnprepareResources; the first of each is a fresh driver's."""
    import asyncio
    import shutil
    import tempfile

    # A node's CDI directory (/var/run/cdi) is a tmpfs, its kubelet plugins dir a disk.
    shm = Path("/dev/shm")
    spec_dir = Path(tempfile.mkdtemp(prefix="bench-cdi-", dir=shm if shm.is_dir() else workdir))
    settings = DraSettings(
        driver_name=driver,
        node_name=node,
        kubelet_plugins_dir=workdir / "dra-plugins",
        plugins_registry_dir=workdir / "dra-registry",
        cdi_spec_dir=spec_dir,
    )
    dra = DraDriver(Fixed, settings, claims)
    task = asyncio.create_task(dra.run())
    client = DraClient(driver, settings.socket_path)
    samples: list[float] = []
    both: list[float] = []
    try:
        await asyncio.wait_for(dra.ready.wait(), 30)
        health = client.watch_health()
        while not await anext(health):  # the backend's devices are in
            pass
        await health.aclose()
        for _ in range(rounds):
            start = time.perf_counter()
            answer = (await client.prepare([claim]))[claim.uid]
            samples.append((time.perf_counter() - start) * 1000)
            if answer.error:
                raise RuntimeError(f"prepare failed: {answer.error}")
            await client.unprepare([claim])
            both.append((time.perf_counter() - start) * 1000)
    finally:
        await client.close()
        dra.stop()
        await task
        shutil.rmtree(spec_dir, ignore_errors=True)
    return samples, both


GOAL_MS = 10.0


async def compared_rows(
    source: Any,
    claim: DraClaim,
    *,
    driver: str,
    node: str,
    workdir: Path,
    rounds: int,
) -> list[Row]:
    """Prepare through ``source`` (one GET per prepare), beside the device plugin's Allocate."""
    prepare, both = await prepare_samples(
        source, claim, driver=driver, node=node, workdir=workdir / "read", rounds=rounds
    )
    p50 = percentile(both[1:], 50)
    rows = [
        Row("DRA first Prepare", prepare[0], "ms", "", None),
        Row("DRA Prepare p50", percentile(prepare[1:], 50), "ms", "", None),
        Row("DRA Prepare+Unprepare p50", p50, "ms", f"<= {GOAL_MS:.0f}", p50 <= GOAL_MS),
        Row("DRA Prepare+Unprepare p99", percentile(both[1:], 99), "ms", "", None),
    ]
    allocate = await allocate_samples(workdir / "device-plugin", rounds, UNIFORM, count=1)
    return [
        *rows,
        Row(
            "device plugin: admit 1 device (Allocate) p50", percentile(allocate, 50), "ms", "", None
        ),
        Row(
            "device plugin: admit 1 device (Allocate) p99", percentile(allocate, 99), "ms", "", None
        ),
    ]
