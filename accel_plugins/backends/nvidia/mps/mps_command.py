"""``accel-plugins mps-control-daemon``: its flags, and how it runs.

The same config file and flags as ``accel-plugins nvidia`` (it must find the
same MPS resources on the same GPUs, ``--simulate`` included), plus
``--mps-control-path``. Cheap to import (the CLI lists it in ``--help``); the
daemon, NVML and YAML are imported by :func:`run`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from typing import Any

from accel_plugins.backends.nvidia.command import OPTIONS as NVIDIA_OPTIONS
from accel_plugins.plugin.command import Option

log = logging.getLogger(__name__)


def _program(text: str) -> tuple[str, ...]:
    from accel_plugins.backends.nvidia.mps.mps_control import parse_program

    return parse_program(text)


OPTIONS = (
    *NVIDIA_OPTIONS,
    Option(
        "--mps-control-path",
        "the MPS control program, or a command a shell would split (default "
        "nvidia-cuda-mps-control from PATH; with --simulate, the fake shipped in this package)",
        type=_program,
        env=("MPS_CONTROL_PATH",),
        metavar="PROGRAM",
    ),
)
SUMMARY = "run an MPS control daemon for each MPS-shared NVIDIA resource (sharing.mps)"


def run(options: Mapping[str, Any], environ: Mapping[str, str]) -> int:
    """Validate (ConfigError: exit 2), then supervise until SIGTERM/SIGINT; SIGHUP reloads."""
    from accel_plugins.backends.nvidia.mps.mps_startup import load_daemons

    load_daemons(options, environ)  # refuse a bad config before anything starts

    async def main() -> int:
        loop = asyncio.get_running_loop()
        while True:
            daemons = load_daemons(options, environ)
            stop = asyncio.Event()
            reload = asyncio.Event()
            loop.add_signal_handler(signal.SIGTERM, stop.set)
            loop.add_signal_handler(signal.SIGINT, stop.set)
            loop.add_signal_handler(signal.SIGHUP, _both_set, reload, stop)
            await daemons.run(stop)
            if not reload.is_set():
                return 0
            log.info("SIGHUP: reloading the config and restarting the MPS control daemons")

    return asyncio.run(main())


def _both_set(*events: asyncio.Event) -> None:
    for event in events:
        event.set()
