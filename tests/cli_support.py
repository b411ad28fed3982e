"""Run the ``accel-plugins`` command line as a separate process, as an operator would."""

from __future__ import annotations

import asyncio
import subprocess
import sys


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accel_plugins.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def run_cli_async(*argv: str) -> tuple[int, str, str]:
    """``run_cli`` for tests on the event loop: (exit code, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "accel_plugins.cli",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
