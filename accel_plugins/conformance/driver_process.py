"""A driver the kit starts from a command, so it can restart it and simulate a reboot.

The command is an argv (never a shell); in each argument the kit replaces
``{kubeconfig}``, ``{node}``, ``{driver}``, ``{registry}``, ``{cdi_dir}`` (the
first ``--cdi-dir``), ``{boot_id_file}`` and ``{workdir}``; the environment also
carries ``KUBECONFIG`` and ``NODE_NAME``. Stopping is SIGTERM, then SIGKILL after
a grace period, as the kubelet stops a pod.

A reboot, as far as a process can be made to see one: the driver is stopped,
the CDI spec files created or changed since the kit started are removed
(``/var/run/cdi`` is a tmpfs on a real node: a reboot empties it; files that
were there before are left alone), and ``{boot_id_file}`` gets a new boot ID. A
driver that reads the kernel's boot ID itself sees the same boot, so it takes
the reboot for a restart; its CDI specs are gone all the same.

This module and ``envtest`` are the only ones in the package that start
processes (tests/security/test_no_shell.py allows these two by name).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from accel_plugins.errors import AccelPluginsError

PLACEHOLDERS = ("kubeconfig", "node", "driver", "registry", "cdi_dir", "boot_id_file", "workdir")
STOP_GRACE = 20.0


class DriverExitedError(AccelPluginsError):
    """The driver's process ended when it should be running."""


def expand(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Each ``{name}`` of :data:`PLACEHOLDERS` replaced; other braces left as they are."""
    out = []
    for arg in argv:
        for name in PLACEHOLDERS:
            arg = arg.replace("{" + name + "}", values.get(name, ""))
        out.append(arg)
    return out


class DriverProcess:
    """One driver process at a time, from ``argv`` with the placeholders filled in."""

    def __init__(
        self,
        argv: Sequence[str],
        values: Mapping[str, str],
        *,
        log_path: Path,
        boot_id_file: Path,
        cdi_dirs: Sequence[Path],
    ) -> None:
        self.argv = expand(argv, values)
        self.env = {
            **os.environ,
            "KUBECONFIG": values.get("kubeconfig", ""),
            "NODE_NAME": values.get("node", ""),
        }
        self.log_path = log_path
        self.boot_id_file = boot_id_file
        self.cdi_dirs = tuple(cdi_dirs)
        self.starts = 0
        self._process: asyncio.subprocess.Process | None = None
        self._before = self._spec_files()  # what a reboot leaves alone
        if not boot_id_file.exists():
            self.new_boot_id()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    def new_boot_id(self) -> str:
        boot_id = str(uuid.uuid4())
        self.boot_id_file.write_text(boot_id + "\n")
        return boot_id

    async def start(self) -> None:
        if self.running:
            return
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                start_new_session=True,  # the kit's Ctrl-C is not the driver's
            )
        self.starts += 1

    def check_alive(self) -> None:
        """DriverExitedError with the log's tail when the process has ended."""
        if self._process is not None and self._process.returncode is not None:
            raise DriverExitedError(
                f"the driver exited with status {self._process.returncode}:\n{self.log_tail()}"
            )

    async def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the exit status."""
        process, self._process = self._process, None
        if process is None:
            return None
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        return process.returncode

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def reboot(self) -> list[Path]:
        """Stop, remove the CDI specs written during the run, new boot ID, start; the removed."""
        await self.stop()
        removed = []
        for path, stamp in self._spec_files().items():
            if self._before.get(path) != stamp:
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
        self.new_boot_id()
        await self.start()
        return removed

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _spec_files(self) -> dict[Path, int]:
        found = {}
        for directory in self.cdi_dirs:
            with contextlib.suppress(OSError):
                for path in directory.iterdir():
                    with contextlib.suppress(OSError):
                        found[path] = path.stat().st_mtime_ns
        return found
