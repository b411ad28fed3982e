"""Claim prepare over the DRA socket, beside the device-plugin path's admission.

``NodePrepareResources`` as the kubelet calls it (the emulator's DraClient on
the driver's ``dra.sock``), for one claim of one device: the driver reads the
ResourceClaim from the API server (one GET, loopback), writes the claim's CDI
spec and its checkpoint, and answers. Each round unprepares the claim after,
so every prepare does the API read again. Beside it, the device-plugin path
for the same device: the emulator's Allocate through the same framework
(bench_admission), where no API server is involved.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench_admission import UNIFORM, Fixed, allocate_samples
from benchlib import Row, percentile

from accel_plugins.dra.driver import DraDriver, DraSettings
from accel_plugins.kubelet.dra import DraClaim, DraClient


async def prepare_samples(
    claims: Any, claim: DraClaim, *, driver: str, node: str, workdir: Path, rounds: int
) -> list[float]:
    """Milliseconds per NodePrepareResources of ``claim`` (allocated device ``u0``)."""
    import asyncio

    settings = DraSettings(
        driver_name=driver,
        node_name=node,
        kubelet_plugins_dir=workdir / "dra-plugins",
        plugins_registry_dir=workdir / "dra-registry",
        cdi_spec_dir=workdir / "dra-cdi",
    )
    dra = DraDriver(Fixed, settings, claims)
    task = asyncio.create_task(dra.run())
    client = DraClient(driver, settings.socket_path)
    samples: list[float] = []
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
    finally:
        await client.close()
        dra.stop()
        await task
    return samples


async def compared_rows(
    claims: Any, claim: DraClaim, *, driver: str, node: str, workdir: Path, rounds: int
) -> list[Row]:
    prepare = await prepare_samples(
        claims, claim, driver=driver, node=node, workdir=workdir, rounds=rounds
    )
    allocate = await allocate_samples(workdir / "device-plugin", rounds, UNIFORM, count=1)
    return [
        Row("DRA claim prepare (API read + CDI spec) p50", percentile(prepare, 50), "ms", "", None),
        Row("DRA claim prepare (API read + CDI spec) p99", percentile(prepare, 99), "ms", "", None),
        Row(
            "device plugin: admit 1 device (Allocate) p50", percentile(allocate, 50), "ms", "", None
        ),
        Row(
            "device plugin: admit 1 device (Allocate) p99", percentile(allocate, 99), "ms", "", None
        ),
    ]
