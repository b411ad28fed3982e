"""Fixtures for the generic /dev backend: a fake host /dev and /sys in a temp dir.

``FakeHost`` is accel_plugins.testing's (real device nodes, a kernel-shaped
sysfs) with the generic backend's settings added.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from accel_plugins import testing
from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.monitor import UdevSource
from tests.framework_fixtures import TreeRecorder


class FakeHost(testing.FakeHost):
    """The plugin's fake host, plus the generic backend's settings for it."""

    def settings(self, **overrides: Any) -> GenericSettings:
        values: dict[str, Any] = {
            "dev_root": self.dev,
            "sys_root": self.sys,
            "udev_source": UdevSource.OFF,
        }
        return GenericSettings(**(values | overrides))


@pytest.fixture
def fake_host(accel_host: testing.FakeHost) -> FakeHost:
    return FakeHost(accel_host.root)


WriteConfig = Callable[[str], Path]


@pytest.fixture
def write_config(tmp_path: Path) -> WriteConfig:
    """Write YAML (dedented) to ``config.yaml`` in the test's temp dir."""

    def write(text: str) -> Path:
        path = tmp_path / "config.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    return write


RunBackend = Callable[[GenericBackend], Awaitable[TreeRecorder]]


@pytest.fixture
async def run_backend() -> AsyncIterator[RunBackend]:
    """Factory: run a backend in a task until the test ends; returns its TreeRecorder."""
    tasks: list[asyncio.Task[None]] = []

    async def start(backend: GenericBackend) -> TreeRecorder:
        published = TreeRecorder()
        tasks.append(asyncio.create_task(backend.run(published)))
        await published.wait_for(lambda tree: True)
        return published

    yield start
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- umockdev ------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]


def umockdev_problem() -> str | None:
    """Why the umockdev tests cannot run here, or None."""
    if shutil.which("umockdev-wrapper") is None:
        return "umockdev-wrapper not found (Debian package umockdev)"
    if not Path("/usr/lib/python3/dist-packages/gi").is_dir():
        return "python3-gi not found (Debian package python3-gi)"
    if not list(Path("/usr/lib").glob("*/girepository-1.0/UMockdev-1.0.typelib")):
        return "UMockdev typelib not found (Debian package gir1.2-umockdev-1.0)"
    return None


class UmockdevHarness:
    """The test's end of tests/umockdev_harness.py (see there for the protocol)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.published = TreeRecorder()
        self.trees: list[dict[str, dict[str, dict[str, Any]]]] = []
        self._replies: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._stderr: list[str] = []
        self._readers = [
            asyncio.create_task(self._read_stdout()),
            asyncio.create_task(self._read_stderr()),
        ]
        self._changed = asyncio.Event()

    @classmethod
    async def spawn(cls) -> UmockdevHarness:
        """tests/umockdev_harness.py started under umockdev-wrapper."""
        process = await asyncio.create_subprocess_exec(
            "umockdev-wrapper",
            sys.executable,
            "-m",
            "tests.umockdev_harness",
            cwd=REPO,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            message = json.loads(line)
            if "tree" in message:
                self.trees.append(message["tree"])
                self._changed.set()
            else:
                await self._replies.put(message)
        await self._replies.put({"exited": True})

    async def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for line in self.process.stderr:
            self._stderr.append(line.decode(errors="replace"))

    def log(self) -> str:
        return "".join(self._stderr[-40:])

    async def _call(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        await self.process.stdin.drain()
        try:
            async with asyncio.timeout(20):
                reply = await self._replies.get()
        except TimeoutError:
            raise AssertionError(
                f"no reply to {command['op']}; harness log:\n{self.log()}"
            ) from None
        if "exited" in reply:
            await self.process.wait()
            await asyncio.gather(*self._readers, return_exceptions=True)
            raise AssertionError(
                f"the harness exited ({self.process.returncode}) on {command['op']}:\n{self.log()}"
            )
        return reply

    async def start(
        self,
        config: str,
        *,
        udev_source: str = "kernel",
        plugin_dir: Path | None = None,
        rescan_interval: float = 3600.0,
    ) -> None:
        """Run the backend (and, with ``plugin_dir``, the manager). The default
        rescan interval is an hour so only uevents can explain a change."""
        await self._call(
            op="start",
            config=config,
            udev_source=udev_source,
            plugin_dir=str(plugin_dir) if plugin_dir else None,
            rescan_interval=rescan_interval,
        )

    async def add(self, record: str, *, uevent: str | None = None) -> None:
        await self._call(op="add", record=textwrap.dedent(record).strip() + "\n", uevent=uevent)

    async def uevent(self, syspath: str, action: str) -> None:
        await self._call(op="uevent", syspath=syspath, action=action)

    async def set_attribute(self, syspath: str, attribute: str, value: str) -> None:
        await self._call(op="set", syspath=syspath, attribute=attribute, value=value)

    async def remove(self, syspath: str) -> None:
        await self._call(op="remove", syspath=syspath)

    async def wait_for_tree(
        self, predicate: Callable[[dict[str, dict[str, dict[str, Any]]]], bool], timeout: float = 10
    ) -> dict[str, dict[str, dict[str, Any]]]:
        try:
            async with asyncio.timeout(timeout):
                while not (self.trees and predicate(self.trees[-1])):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            last = self.trees[-1] if self.trees else None
            raise AssertionError(f"last tree {last}; harness log:\n{self.log()}") from None
        return self.trees[-1]

    async def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            async with asyncio.timeout(10):
                await self.process.wait()
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        for reader in self._readers:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)


@pytest.fixture
async def umockdev_harness() -> AsyncIterator[UmockdevHarness]:
    """The generic backend in a process under umockdev-wrapper (skipped without umockdev)."""
    problem = umockdev_problem()
    if problem:
        pytest.skip(problem)
    harness = await UmockdevHarness.spawn()
    yield harness
    await harness.close()
