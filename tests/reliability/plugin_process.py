"""Run `accel-plugins` as a real process against the kubelet emulator.

Two kinds of node, both runnable anywhere: a simulated NVIDIA node and the
generic backend over a fake /dev (real mknod nodes under a temp dir). Output
goes to a file, not a pipe, so a chatty plugin can never block on a full pipe.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from accel_plugins.kubelet_emulator import Kubelet
from tests.fixtures.generic import FakeHost

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0  # a cold interpreter importing grpc on a busy 2-core machine


@dataclass
class Node:
    """What to run and what the kubelet should then see."""

    argv: list[str]
    resource: str
    devices: int


def ready(node: Node, registrations: int = 0, *, source: str = "") -> Callable[[Kubelet], bool]:
    """Registered beyond ``registrations`` (by ``source`` when given, e.g. "plugin watcher")
    with all of ``node``'s devices, healthy."""

    def check(k: Kubelet) -> bool:
        view = k.resources.get(node.resource)
        return (
            len(k.registrations) > registrations
            and (not source or k.registrations[-1].source.startswith(source))
            and view is not None
            and view.connected
            and view.allocatable == node.devices
        )

    return check


def our_sockets(directory: Path) -> list[Path]:
    return sorted(directory.glob("*_*.sock"))


@dataclass
class PluginProcesses:
    """Starts plugin processes on ``plugin_dir``; kills any left running at teardown."""

    plugin_dir: Path
    logs: Path
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)

    async def spawn(self, node: Node, *extra: str) -> asyncio.subprocess.Process:
        log = self.logs / f"plugin-{len(self.procs)}.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "accel_plugins.cli.main",
                *node.argv,
                "--plugin-dir",
                str(self.plugin_dir),
                "--pod-resources-socket",
                str(self.plugin_dir / "no-pod-resources.sock"),
                *extra,
                cwd=ROOT,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        self.procs.append(proc)
        return proc

    def output(self, proc: asyncio.subprocess.Process) -> str:
        return (self.logs / f"plugin-{self.procs.index(proc)}.log").read_text(errors="replace")

    async def stop_all(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
                await proc.wait()


def nvidia_node(profile: str = "pcie-4gpu", devices: int = 4) -> Node:
    argv = ["nvidia", "--simulate", profile, "--metrics-address", ""]
    return Node(argv, "nvidia.com/gpu", devices)


GENERIC_CONFIG = """
devices:
  - name: serial
    groups:
      - paths:
          - {path: /dev/ttyUSB*, permissions: rw}
"""


def generic_node(root: Path, devices: int = 3) -> Node:
    """The generic backend over a fake /dev with ``devices`` serial nodes (skips without
    CAP_MKNOD)."""
    host = FakeHost(root / "host")
    for minor in range(devices):
        host.node(f"/dev/ttyUSB{minor}", minor=minor)
    config = root / "generic.yaml"
    config.write_text(textwrap.dedent(GENERIC_CONFIG))
    argv = ["generic", "--config", str(config), "--dev-root", str(host.dev)]
    argv += ["--sys-root", str(host.sys), "--udev-source", "off", "--metrics-address", ""]
    return Node(argv, "accel-plugins.io/serial", devices)
