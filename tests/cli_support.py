"""Run the ``accel-plugins`` command line as a separate process, as an operator would."""

from __future__ import annotations

import subprocess
import sys


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accel_plugins.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
