"""`accel-plugins demo`: the walkthrough on the real /dev, on a fake one, and from the CLI."""

from __future__ import annotations

import asyncio
import io
import re
import sys
from pathlib import Path

from accel_plugins.backends.generic.discovery import device_id
from accel_plugins.demo.run import run_demo
from tests.fixtures.generic import REPO, FakeHost


def workdir_of(output: str) -> Path:
    match = re.search(r"working directory\s+(\S+)", output)
    assert match, output
    return Path(match.group(1))


async def test_walkthrough_on_the_real_dev() -> None:
    out = io.StringIO()
    assert await run_demo(once=True, out=out) == 0
    text = out.getvalue()
    for section in ("Registration", "Devices", "Allocation", "Metrics"):
        assert f"== {section}" in text
    assert "accel-plugins.io/dev-null: 4 allocatable of 4" in text
    for replica in range(4):
        assert f"{device_id(replica, ['/dev/null'])[:12]}  Healthy" in text
    assert "accel-plugins.io/random: 2 allocatable of 2" in text
    # The container response of the demo pod.
    assert "device  /dev/null -> /dev/null (rw)" in text
    assert "device  /dev/full -> /dev/disk-full (mrw)" in text
    pairs = [device_id(r, ["/dev/zero", "/dev/full"]) for r in (0, 1)]
    assert any(f"cdi     accel-plugins.io/zero-full={pair}" in text for pair in pairs)
    assert re.search(r"Prometheus metrics at http://127\.0\.0\.1:\d+/metrics", text)
    assert (
        'accel_plugins_devices{health="Healthy",resource="accel-plugins.io/dev-null"} 4.0' in text
    )
    # The simulated NVIDIA node: time-sliced GPUs next to MPS-shared ones, the MPS contract.
    assert "nvidia.com/gpu.shared: 16 allocatable of 16 (time-sliced" in text
    assert "nvidia.com/gpu.mps: 16 allocatable of 16 (MPS" in text
    assert "set_default_active_thread_percentage 25" in text
    assert "env     CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu.mps/pipe" in text
    assert re.search(r"mount   \S+/mps/shm -> /dev/shm \(rw\)", text)
    assert not workdir_of(text).exists()  # cleaned up


async def test_the_dev_root_decides_what_is_found(fake_host: FakeHost) -> None:
    for name in ("null", "zero", "full", "random"):  # no urandom here
        fake_host.node(f"/dev/{name}", major=1)
    out = io.StringIO()
    assert await run_demo(once=True, out=out, dev_root=fake_host.dev) == 0
    text = out.getvalue()
    assert "accel-plugins.io/random: 1 allocatable of 1" in text
    assert "/dev/urandom" not in text.split("== Devices")[1]


async def test_the_cli_runs_it() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "accel_plugins.cli.main",
        "demo",
        "--once",
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    assert "== Allocation for pod default/demo-pod" in stdout.decode()
