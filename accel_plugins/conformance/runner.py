"""Run the selected checks against one driver: set up, check in catalogue order, tear down.

``--only`` runs the named checks and those they need (so a failure of a need
still explains a skip); ``--skip`` leaves checks out. A check whose need
failed or was skipped is skipped with that reason. A driver the kit started
that dies during a check fails that check and is started again for the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from accel_plugins.conformance import (
    checks_features,
    checks_lifecycle,
    checks_prepare,
    checks_registration,
)
from accel_plugins.conformance.catalogue import BY_ID, CHECKS, Check
from accel_plugins.conformance.cluster import Cluster
from accel_plugins.conformance.driver_process import DriverExitedError, DriverProcess
from accel_plugins.conformance.kubelet_side import KubeletSide
from accel_plugins.conformance.report import Outcome, Status
from accel_plugins.conformance.session import NO_COMMAND, Failed, Session, Skipped, Timeouts
from accel_plugins.errors import AccelPluginsError
from accel_plugins.kubelet_emulator.errors import PluginCallError

log = logging.getLogger(__name__)

CheckFunction = Callable[[Session], Awaitable[str]]
FUNCTIONS: dict[str, CheckFunction] = {
    "registration": checks_registration.registration,
    "versions": checks_registration.versions,
    "slices-node": checks_registration.slices_node,
    "slices-pools": checks_registration.slices_pools,
    "slices-valid": checks_registration.slices_valid,
    "prepare": checks_prepare.prepare,
    "prepare-idempotent": checks_prepare.prepare_idempotent,
    "unprepare-idempotent": checks_prepare.unprepare_idempotent,
    "unprepare-unknown": checks_prepare.unprepare_unknown,
    "other-drivers": checks_prepare.other_drivers,
    "prepare-error": checks_prepare.prepare_error,
    "concurrent": checks_prepare.concurrent,
    "restart": checks_lifecycle.restart,
    "one-bad-claim": checks_prepare.one_bad_claim,
    "kubelet-restart": checks_lifecycle.kubelet_restart,
    "reboot": checks_lifecycle.reboot,
    "health": checks_lifecycle.health,
    "taints": checks_registration.taints,
    "shares": checks_features.shares,
    "subrequests": checks_features.subrequests,
    "admin-access": checks_features.admin_access,
}
CHECK_LIMIT = 240.0  # seconds for any one check, whatever it waits for


@dataclass(frozen=True)
class Target:
    """The driver under test and where the kit finds it."""

    driver: str
    node: str
    registry: Path
    cdi_dirs: tuple[Path, ...]
    command: tuple[str, ...] = ()  # empty: the driver is already running
    workdir: Path = Path()
    sole_node: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)


def selected(only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[Check]:
    """The checks to run, in catalogue order: ``only`` and what it needs, less ``skip``."""
    wanted = set(only) if only else {c.id for c in CHECKS}
    queue = list(wanted)
    while queue:
        for need in BY_ID[queue.pop()].needs:
            if need not in wanted:
                wanted.add(need)
                queue.append(need)
    return [c for c in CHECKS if c.id in wanted and c.id not in set(skip)]


def _skip_reason(check: Check, done: dict[str, Outcome], session: Session) -> str:
    for need in check.needs:
        outcome = done.get(need)
        if outcome is not None and outcome.status is not Status.PASSED:
            return f"needs {need}, which {outcome.status.value}"
    if check.needs_command and session.process is None:
        return NO_COMMAND
    return ""


async def _run_one(check: Check, session: Session) -> tuple[Status, str]:
    try:
        message = await asyncio.wait_for(FUNCTIONS[check.id](session), CHECK_LIMIT)
    except Failed as exc:
        return Status.FAILED, str(exc)
    except Skipped as exc:
        return Status.SKIPPED, str(exc)
    except DriverExitedError as exc:
        return Status.FAILED, str(exc)
    except PluginCallError as exc:
        return Status.FAILED, str(exc)
    except TimeoutError:
        return Status.FAILED, f"did not finish within {CHECK_LIMIT:g}s"
    except AccelPluginsError as exc:
        return Status.FAILED, f"the kit could not carry the check out: {exc}"
    return Status.PASSED, message


async def _recover(session: Session) -> None:
    """Start a driver that died again, so that one crash fails one check."""
    process = session.process
    if process is not None and not process.running:
        log.warning("the driver exited; starting it again:\n%s", process.log_tail())
        await process.start()
        with contextlib.suppress(TimeoutError, DriverExitedError):
            await session.wait_registered()


async def run_checks(session: Session, checks: Sequence[Check]) -> list[Outcome]:
    done: dict[str, Outcome] = {}
    for check in checks:
        started = time.monotonic()
        reason = _skip_reason(check, done, session)
        if reason:
            status, message = Status.SKIPPED, reason
        else:
            status, message = await _run_one(check, session)
            with contextlib.suppress(AccelPluginsError, PluginCallError, TimeoutError):
                await asyncio.wait_for(session.tidy(), session.timeouts.call)
            await _recover(session)
        done[check.id] = Outcome(check, status, message, time.monotonic() - started)
        log.info("%s %s: %s", check.id, status.value, message.splitlines()[0] if message else "")
    return list(done.values())


@contextlib.asynccontextmanager
async def session_for(target: Target, cluster: Cluster, kubeconfig: str) -> AsyncIterator[Session]:
    """The kubelet side watching, the cluster objects made, the driver started (given a
    command); all undone on the way out."""
    kubelet = KubeletSide(target.registry, target.driver)
    process = None
    if target.command:
        first_cdi = str(target.cdi_dirs[0]) if target.cdi_dirs else ""
        values = {
            "kubeconfig": kubeconfig,
            "node": target.node,
            "driver": target.driver,
            "registry": str(target.registry),
            "cdi_dir": first_cdi,
            "boot_id_file": str(target.workdir / "boot_id"),
            "workdir": str(target.workdir),
        }
        process = DriverProcess(
            target.command,
            values,
            log_path=target.workdir / "driver.log",
            boot_id_file=target.workdir / "boot_id",
            cdi_dirs=target.cdi_dirs,
        )
    session = Session(
        target.driver,
        target.node,
        target.cdi_dirs,
        kubelet,
        cluster,
        process,
        target.sole_node,
        target.timeouts,
    )
    await cluster.discover()
    await cluster.prepare_objects()
    try:
        await kubelet.start()
        if process is not None:
            await process.start()
        yield session
    finally:
        if process is not None:
            await process.stop()
        await kubelet.stop()
        await cluster.cleanup()
