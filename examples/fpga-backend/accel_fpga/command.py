"""``accel-plugins fpga``: how the FPGA backend is found and configured.

The entry point ``accel_plugins.backends: fpga`` names :data:`COMMAND`. This
module stays cheap to import (``accel-plugins --help`` loads every installed
command): the backend itself is imported inside ``build``.
"""

from __future__ import annotations

from pathlib import Path

from accel_plugins.plugin import BackendCommand, BackendContext, BackendFactory, ConfigError, Option


def seconds(text: str) -> float:
    """A positive number of seconds (ValueError refuses the flag's value)."""
    value = float(text)
    if not value > 0:
        raise ValueError(f"{text!r} is not a positive number of seconds")
    return value


def build(context: BackendContext) -> BackendFactory:
    """Check the options now (exit 2 on a bad one) and return the backend factory."""
    from accel_fpga.backend import FpgaBackend

    dev_root: Path = context.options["dev_root"]
    sys_root: Path = context.options["sys_root"]
    interval: float = context.options["poll_interval"]
    for flag, path in (("--dev-root", dev_root), ("--sys-root", sys_root)):
        if not path.is_dir():
            raise ConfigError(flag, "", f"{path} is not a directory")
    return lambda: FpgaBackend(dev_root, sys_root, interval)


COMMAND = BackendCommand(
    summary="expose FPGA cards (/dev/fpgaN) as example.com/fpga",
    build=build,
    options=(
        Option("--dev-root", "the host's /dev as this process sees it", Path("/dev"), Path),
        Option("--sys-root", "the host's /sys as this process sees it", Path("/sys"), Path),
        Option(
            "--poll-interval",
            "seconds between two scans of the cards",
            1.0,
            seconds,
            env=("FPGA_POLL_INTERVAL",),
            metavar="SECONDS",
        ),
    ),
    install="pip install accel-fpga",
)
