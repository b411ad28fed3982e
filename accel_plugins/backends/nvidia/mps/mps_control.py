"""The one adapter to ``nvidia-cuda-mps-control`` (or the fake that stands in for it).

Two uses, as NVIDIA's ``cmd/mps-control-daemon/mps/daemon.go`` makes them,
both with ``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY`` set to the
resource's directories:

- the control daemon itself: ``<program> -f``. NVIDIA runs ``-d`` (the program
  forks into the background and is never watched again); in the foreground it
  is our child, so its death is seen at once and it is restarted.
- a command: ``<program>`` with the command on its standard input (the client
  hands it to the running daemon and prints the answer).

The environment is ours plus those two variables (NVIDIA passes only the two);
the fake needs ``PATH`` and ``PYTHONPATH``, the real program ignores the rest.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from accel_plugins.backends.nvidia.mps.mps_root import LOG_ENV, PIPE_ENV
from accel_plugins.errors import AccelPluginsError, ConfigError

PROGRAM = "nvidia-cuda-mps-control"
FAKE_MODULE = "accel_plugins.backends.nvidia.mps.fake_mps_control"


def fake_program() -> tuple[str, ...]:
    """The fake control program, run by this interpreter."""
    return (sys.executable, "-m", FAKE_MODULE)


class MpsControlError(AccelPluginsError):
    """A command could not be handed to the control daemon."""


def parse_program(text: str) -> tuple[str, ...]:
    """``--mps-control-path``: a program, or words a shell would split (``python3 -m ...``)."""
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"cannot split {text!r}: {exc}") from None
    if not words:
        raise ValueError("names no program")
    return words


@dataclass(frozen=True, slots=True)
class MpsControl:
    """How to run the control program for one resource's pipe and log directories."""

    program: tuple[str, ...]
    pipe_dir: Path
    log_dir: Path
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def env(self) -> dict[str, str]:
        return {**self.environ, PIPE_ENV: str(self.pipe_dir), LOG_ENV: str(self.log_dir)}

    async def start(self) -> asyncio.subprocess.Process:
        """The control daemon in the foreground, its output piped to us (one stream)."""
        try:
            return await asyncio.create_subprocess_exec(
                *self.program,
                "-f",
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                # Its own session: a terminal's Ctrl-C or a group signal reaches us only,
                # and we stop it with quit, as NVIDIA does.
                start_new_session=True,
            )
        except OSError as exc:
            raise ConfigError(
                "--mps-control-path", "", f"cannot run {shlex.join(self.program)}: {exc}"
            ) from exc

    async def send(self, command: str, *, timeout: float = 10.0) -> str:
        """Hand ``command`` to the running daemon; its answer, or MpsControlError."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.program,
                env=self.env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise MpsControlError(f"cannot run {shlex.join(self.program)}: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(command.encode()), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise MpsControlError(f"{command!r}: no answer within {timeout:g}s") from None
        if proc.returncode != 0:
            reason = err.decode(errors="replace").strip() or f"exit status {proc.returncode}"
            raise MpsControlError(f"{command!r}: {reason}")
        return out.decode(errors="replace")
