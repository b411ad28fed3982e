"""Checks across a node's life: the driver's restart, the kubelet's restart, a reboot, health."""

from __future__ import annotations

import asyncio
import contextlib
import time

from accel_plugins.conformance import cdi_files, checks_registration, slice_rules
from accel_plugins.conformance.checks_prepare import check_answer, same_answer
from accel_plugins.conformance.session import Failed, Session, Skipped
from accel_plugins.kubelet_emulator.errors import PluginCallError

FIRST_HEALTH = 10.0  # seconds for the health stream's first list


async def _back(s: Session, what: str) -> None:
    try:
        await s.wait_registered()
    except TimeoutError as exc:
        raise Failed(f"after {what}: {exc}") from exc


async def restart(s: Session) -> str:
    process = s.need_process()
    claim, allocated = await s.claim_for(1)
    before = await s.prepare_one(claim)
    await process.restart()
    await _back(s, "its restart")
    after = await s.prepare_one(claim)
    difference = same_answer(before, after)
    if difference:
        raise Failed(f"prepared again after a restart, the answer changed: {difference}")
    check_answer(s, after, allocated)
    errors = await s.unprepare([claim])
    if errors.get(claim.uid):
        raise Failed(f"NodeUnprepareResources after a restart: {errors[claim.uid]}")
    return "the same answer across a restart, then released"


async def reboot(s: Session) -> str:
    process = s.need_process()
    claim, allocated = await s.claim_for(1)
    before = await s.prepare_one(claim)
    removed = await process.reboot()
    await _back(s, "the reboot")
    after = await s.prepare_one(claim)
    missing = cdi_files.undefined(after.cdi_ids, s.cdi_dirs)
    if missing:
        raise Failed(
            f"after the reboot ({len(removed)} CDI spec files removed, a new boot ID), "
            "NodePrepareResources answered with CDI IDs no spec defines:\n" + "\n".join(missing)
        )
    difference = same_answer(before, after)
    if difference and sorted(d.device for d in before.devices) != sorted(
        d.device for d in after.devices
    ):
        raise Failed(f"after the reboot the claim's devices changed: {difference}")
    check_answer(s, after, allocated)
    return f"{len(removed)} CDI spec files removed; prepared again with its specs on disk"


async def kubelet_restart(s: Session) -> str:
    before = slice_rules.device_keys(await s.cluster.node_slices())
    await s.kubelet.stop()
    wiped = await s.cluster.wipe_node_slices()
    started = time.monotonic()
    await s.kubelet.start()
    await _back(s, "the kubelet's restart")
    deadline = started + s.timeouts.repair
    while True:
        items = await s.cluster.node_slices()
        now = slice_rules.device_keys(items)
        if now >= before and not slice_rules.pool_problems(items):
            break
        if time.monotonic() > deadline:
            missing = sorted(before - now)
            restored = await _restore(s)
            raise Failed(
                f"{wiped} slices wiped; after {s.timeouts.repair:g}s {len(missing)} devices are "
                f"still not published again (first: {missing[:3]}){restored}"
            )
        await asyncio.sleep(0.25)
    took = time.monotonic() - started
    return f"{wiped} slices wiped; all {len(before)} devices published again in {took:.1f}s"


async def _restore(s: Session) -> str:
    """After a failed repair: restart a driver the kit started, so later checks find slices."""
    if s.process is None:
        return ""
    await s.process.restart()
    await _back(s, "a restart after the failed repair")
    return "; the kit restarted the driver to go on"


async def health(s: Session) -> str:
    await checks_registration.wait_for_slices(s)
    published = slice_rules.device_keys(await s.cluster.node_slices())
    stream = s.kubelet.client().watch_health()
    try:
        first = await asyncio.wait_for(anext(stream), FIRST_HEALTH)
    except PluginCallError as exc:
        if exc.code.name == "UNIMPLEMENTED":
            raise Skipped("the driver serves no health stream (DRAResourceHealth)") from exc
        raise Failed(f"NodeWatchResources failed: {exc}") from exc
    except TimeoutError as exc:
        raise Failed(f"NodeWatchResources sent nothing within {FIRST_HEALTH:g}s") from exc
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()
    listed = {(d.pool, d.device) for d in first}
    problems = []
    missing = sorted(published - listed)
    if missing:
        problems.append(
            f"{len(missing)} published devices are not in the health stream: {missing[:5]}"
        )
    untimed = sorted(f"{d.pool}/{d.device}" for d in first if d.timeout_seconds <= 0)
    if untimed:
        problems.append(
            f"health_check_timeout_seconds unset for {len(untimed)} devices (first {untimed[0]})"
        )
    if problems:
        raise Failed("\n".join(problems))
    timeouts = sorted({d.timeout_seconds for d in first})
    return f"{len(listed)} devices, health_check_timeout_seconds {timeouts}"
