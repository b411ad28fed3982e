"""A changed config file reaches a running plugin process without a restart.

Both backends, started as the ``accel-plugins`` command with their config in a
ConfigMap volume (tests/support/configmap_volume.py swaps ``..data`` as the kubelet
does). Per case: allocate under config A; config B adds devices (the
resource already held is neither re-registered nor re-sent); a broken file
keeps B serving and shows in the log, the metrics and /healthz; config C
drops the first resource, which the kubelet then sees disconnected, while
the allocation made under A stays in the kubelet's books throughout.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from accel_plugins.kubelet_emulator import Kubelet
from tests.support.cli import free_port
from tests.support.configmap_volume import ConfigMapVolume
from tests.support.metrics import get, parse, series

NULL = "accel-plugins.io/null"
ZERO = "accel-plugins.io/zero"
GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"


def devices(*names: str) -> str:
    # /dev/null and /dev/zero are character devices on every Linux host: no mknod needed.
    # Names are quoted: YAML reads a bare null as nothing.
    return "devices:\n" + "".join(
        f"  - name: '{n}'\n    groups: [{{paths: [{{path: /dev/{n}}}]}}]\n" for n in names
    )


def time_slicing(replicas: int, *, rename: bool = False) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n"
        f"    renameByDefault: {str(rename).lower()}\n"
        f"    resources: [{{name: nvidia.com/gpu, replicas: {replicas}}}]\n"
    )


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    first: str  # config A
    held: str  # the resource allocated under A
    held_count: int  # its devices under A
    grown: str  # config B: keeps `held`, adds `added`
    added: tuple[str, int]  # (resource, allocatable) once B is applied
    broken: str  # fails to load
    error: str  # part of the logged reason
    last: str  # config C: `held` is gone, `kept` serves
    kept: tuple[str, int]


CASES = [
    pytest.param(
        Case(
            argv=("generic",),
            first=devices("null"),
            held=NULL,
            held_count=1,
            grown=devices("null", "zero"),
            added=(ZERO, 1),
            broken="devices: {}\n",
            error="devices: expected a list, got a mapping",
            last=devices("zero"),
            kept=(ZERO, 1),
        ),
        id="generic",
    ),
    pytest.param(
        Case(
            argv=("nvidia", "--simulate", "pcie-4gpu"),
            first="version: v1\n",
            held=GPU,
            held_count=4,
            grown=time_slicing(2),
            added=(GPU, 8),  # the same resource, its devices now replicas
            broken=time_slicing(0),
            error="replicas",
            last=time_slicing(2, rename=True),
            kept=(SHARED, 8),
        ),
        id="nvidia",
    ),
]


class PluginLog:
    """A plugin process's JSON log lines, awaitable by content."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.lines: list[str] = []
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.lines.append(line.decode())
            self._changed.set()

    async def wait_for(self, text: str, timeout: float = 10.0) -> dict[str, object]:
        """The first JSON record whose message holds ``text``, once logged."""
        async with asyncio.timeout(timeout):
            while True:
                for line in self.lines:
                    if text in line:
                        record: dict[str, object] = json.loads(line)
                        return record
                self._changed.clear()
                await self._changed.wait()

    async def close(self) -> None:
        await self._task


@pytest.fixture
def volume(tmp_path: Path) -> ConfigMapVolume:
    return ConfigMapVolume(tmp_path / "config")


async def metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return parse((await asyncio.to_thread(get, f"{url}/metrics"))[1])


@pytest.mark.parametrize("case", CASES)
async def test_config_changes_apply_live_and_a_broken_file_keeps_the_old_one(
    case: Case, kubelet: Kubelet, volume: ConfigMapVolume
) -> None:
    volume.write({"config.yaml": case.first})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "accel_plugins.cli.main",
        *case.argv,
        "--config",
        str(volume.path("config.yaml")),
        "--plugin-dir",
        str(kubelet.plugin_dir),
        "--metrics-address",
        f"127.0.0.1:{port}",
        "--log-format",
        "json",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    log = PluginLog(process.stderr)
    try:
        await kubelet.wait_for_resource(case.held, allocatable=case.held_count, timeout=20)
        await log.wait_for("changes are applied without a restart")
        record = await kubelet.allocate("web", "main", case.held, 1)
        held_updates = kubelet.resources[case.held].updates

        # B: new devices reach the kubelet; the process is the same one.
        volume.write({"config.yaml": case.grown})
        await kubelet.wait_for_resource(case.added[0], allocatable=case.added[1])
        assert process.returncode is None
        if case.added[0] != case.held:
            # Unchanged devices send nothing: no ListAndWatch update, no new registration.
            assert kubelet.resources[case.held].updates == held_updates
            values = await metrics(url)
            registrations = series(values, "accel_plugins_registrations_total")
            assert registrations[(("resource", case.held),)] == 1

        # A broken file: logged, counted, on /healthz (still 200), B keeps serving.
        volume.write({"config.yaml": case.broken})
        failure = await log.wait_for("reload failed")
        assert failure["level"] == "error"
        assert case.error in str(failure["msg"])
        values = await metrics(url)
        assert series(values, "accel_plugins_config_last_reload_successful") == {(): 0}
        assert series(values, "accel_plugins_config_reloads_total") == {
            (("result", "failure"),): 1,
            (("result", "success"),): 1,
        }
        status, body = await asyncio.to_thread(get, f"{url}/healthz")
        assert status == 200
        assert body.startswith("ok\nconfiguration: reload failed, still serving the previous")
        assert case.error in body
        assert kubelet.resources[case.added[0]].allocatable == case.added[1]

        # C: the held resource leaves (its endpoint stops), the other serves.
        volume.write({"config.yaml": case.last})
        await kubelet.wait_for_resource(case.kept[0], allocatable=case.kept[1])
        await kubelet.wait_for(lambda k: not k.resources[case.held].connected)
        values = await metrics(url)
        assert series(values, "accel_plugins_config_last_reload_successful") == {(): 1}
        assert (await asyncio.to_thread(get, f"{url}/healthz")) == (200, "ok\n")
        assert process.returncode is None
        # The kubelet's checkpoint still holds the allocation made under A.
        assert record in kubelet.allocations
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await process.wait()
        await log.close()
    assert process.returncode == 0, "".join(log.lines)
