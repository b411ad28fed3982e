"""``accel-plugins mps-control-daemon``: one supervised MPS control daemon per MPS resource.

For each plan (:mod:`mps_plan`) a :class:`Supervisor` creates the resource's
pipe and log directories under the MPS root, runs the control program there
(:mod:`mps_control`), hands it the limits, then writes ``.started``; when every
daemon has started, ``<root>/.ready`` (NVIDIA's ``cmd/mps-control-daemon``
files, :mod:`mps_root`). For as long as it runs, the daemon holds the root's
life lock (:mod:`mps_lock`), which dies with it however it dies. A control
program that dies takes its ``.started`` (and ``.ready``) away, so the plugin
marks that resource's replicas Unhealthy, and is restarted after a backoff (1 s,
doubling to 30 s). On stop, ``.ready`` goes first, then each daemon gets ``quit``
and its ``.started`` is removed.

Not done, as NVIDIA does: the GPUs' compute mode is left as it is (NVIDIA runs
``nvidia-smi -c EXCLUSIVE_PROCESS`` on start and ``DEFAULT`` on stop, which
needs a privileged container); see the README.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from accel_plugins.backends.nvidia.mps.mps_control import MpsControl, MpsControlError
from accel_plugins.backends.nvidia.mps.mps_lock import DaemonLock
from accel_plugins.backends.nvidia.mps.mps_plan import DaemonPlan
from accel_plugins.backends.nvidia.mps.mps_root import MpsRoot

log = logging.getLogger(__name__)

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 30.0
CONFIGURE_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class Supervisor:
    """Runs, configures and restarts one resource's control daemon until ``stop`` is set."""

    def __init__(
        self,
        plan: DaemonPlan,
        root: MpsRoot,
        program: Sequence[str],
        on_state: Callable[[str, bool], None],
        *,
        environ: Mapping[str, str] | None = None,
        first_backoff: float = FIRST_BACKOFF,
    ) -> None:
        self.plan = plan
        self.first_backoff = first_backoff
        self.root = root
        self.control = MpsControl(
            tuple(program),
            root.pipe_dir(plan.resource),
            root.log_dir(plan.resource),
            dict(os.environ if environ is None else environ),
        )
        self._on_state = on_state
        self.starts = 0

    @property
    def resource(self) -> str:
        return self.plan.resource

    def _prepare(self) -> None:
        _remove(self.root.started_file(self.resource))
        # NVIDIA makes both 0755: clients of any user read the pipe directory.
        for directory in (self.control.pipe_dir, self.control.log_dir):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o755)
        self.root.shm_dir.mkdir(parents=True, exist_ok=True)

    async def _forward(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            log.info("%s: %s", self.resource, raw.decode(errors="replace").rstrip())

    async def _configure(self, proc: asyncio.subprocess.Process) -> None:
        """Send the limits once the daemon answers; it gives no sign of readiness but that."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONFIGURE_TIMEOUT
        delay = 0.02
        commands = self.plan.commands()
        while True:
            try:
                # NVIDIA's AssertHealthy query: answered once the daemon listens.
                await self.control.send("get_default_active_thread_percentage")
                break
            except MpsControlError:
                if proc.returncode is not None or loop.time() > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        for command in commands:
            await self.control.send(command)
            log.info("%s: %s", self.resource, command)

    async def _quit_stale(self) -> None:
        """A daemon left by an earlier run (we were killed) would keep the pipe: quit it."""
        with contextlib.suppress(MpsControlError):
            await self.control.send("quit", timeout=STOP_TIMEOUT)
            log.warning("%s: quit an MPS control daemon left by an earlier run", self.resource)

    async def _quit(self, proc: asyncio.subprocess.Process) -> None:
        try:
            await self.control.send("quit", timeout=STOP_TIMEOUT)
        except MpsControlError as exc:
            log.warning("%s: quit failed (%s); terminating the control daemon", self.resource, exc)
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    async def run(self, stop: asyncio.Event) -> None:
        backoff = self.first_backoff
        while not stop.is_set():
            self._prepare()
            await self._quit_stale()
            proc = await self.control.start()
            self.starts += 1
            log.info("%s: MPS control daemon started (pid %d)", self.resource, proc.pid)
            forward = asyncio.ensure_future(self._forward(proc))
            try:
                await self._configure(proc)
            except MpsControlError as exc:
                # Without its limits it must not serve: stop it and start over (with backoff).
                log.error("%s: MPS control daemon not configured: %s", self.resource, exc)
                if proc.returncode is None:
                    await self._quit(proc)
            else:
                self.root.started_file(self.resource).touch()
                self._on_state(self.resource, True)
            ended = asyncio.ensure_future(proc.wait())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({ended, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            _remove(self.root.started_file(self.resource))
            self._on_state(self.resource, False)
            if stop.is_set():
                if proc.returncode is None:
                    await self._quit(proc)
                await forward
                log.info("%s: MPS control daemon stopped", self.resource)
                return
            await forward
            log.error(
                "%s: MPS control daemon exited (status %s); restarting in %gs",
                self.resource,
                proc.returncode,
                backoff,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)


class Daemons:
    """All of a node's supervisors and the ``.ready`` file that sums them up."""

    def __init__(
        self,
        plans: Sequence[DaemonPlan],
        root: MpsRoot,
        program: Sequence[str],
        *,
        environ: Mapping[str, str] | None = None,
        first_backoff: float = FIRST_BACKOFF,
    ) -> None:
        self.root = root
        self._started = {plan.resource: False for plan in plans}
        self.supervisors = [
            Supervisor(
                plan, root, program, self._on_state, environ=environ, first_backoff=first_backoff
            )
            for plan in plans
        ]

    def _on_state(self, resource: str, started: bool) -> None:
        self._started[resource] = started
        if all(self._started.values()):
            self.root.ready_file.touch()
        else:
            _remove(self.root.ready_file)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``; then ``.ready`` is removed and every daemon quit."""
        if not self.supervisors:
            # As NVIDIA's daemon: nothing to run, wait for a signal (or a SIGHUP's new config).
            log.info("no devices are configured for MPS sharing; waiting")
            await stop.wait()
            return
        self.root.path.mkdir(parents=True, exist_ok=True)
        _remove(self.root.ready_file)
        # Files a killed daemon left must be gone before the lock says "alive" again.
        for supervisor in self.supervisors:
            _remove(self.root.started_file(supervisor.resource))
        lock = DaemonLock(self.root.path)
        if not await lock.acquire(stop):
            return
        try:
            await self._supervise(stop)
        finally:
            lock.release()

    async def _supervise(self, stop: asyncio.Event) -> None:
        tasks = [asyncio.ensure_future(s.run(stop)) for s in self.supervisors]
        stopping = asyncio.ensure_future(stop.wait())
        try:
            # A supervisor only ends early when its program cannot be run at all.
            await asyncio.wait([stopping, *tasks], return_when=asyncio.FIRST_COMPLETED)
        finally:
            _remove(self.root.ready_file)
            stop.set()
            await stopping
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
