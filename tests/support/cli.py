"""Run the ``accel-plugins`` command line as a separate process, as an operator would."""

from __future__ import annotations

import asyncio
import socket
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
        "accel_plugins.cli.main",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def free_port() -> int:
    """A loopback TCP port free right now (for --metrics-address)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def http_get(port: int, path: str) -> tuple[int, str]:
    """GET ``path`` from a plugin's metrics server on loopback: (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    raw = await reader.read()
    writer.close()
    head, _, body = raw.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body
