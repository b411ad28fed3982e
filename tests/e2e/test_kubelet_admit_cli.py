"""`accel-plugins kubelet --admit POD.yaml --once` against a real `accel-plugins generic` process.

The generic plugin serves four accelerators of a fake /dev, two on each NUMA
node (real device nodes, sysfs ``numa_node`` attributes); the emulator runs as
its own process, waits for the resource, admits the pod and exits.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from accel_plugins.kubelet_emulator import checkpoint
from tests.fixtures.generic import FakeHost
from tests.reliability.plugin_process import ROOT
from tests.support.cli import run_cli

RESOURCE = "accel-plugins.io/accel"
START_TIMEOUT = 30.0

CONFIG = """
devices:
  - name: accel
    groups:
      - paths: [{path: "/dev/accel*"}]
"""

POD = f"""
apiVersion: v1
kind: Pod
metadata:
  name: trainer
spec:
  initContainers:
    - name: setup
      image: busybox
      resources:
        limits: {{{RESOURCE}: 1}}
  containers:
    - name: main
      image: trainer:latest
      resources:
        limits: {{{RESOURCE}: 2, cpu: "4"}}
        requests: {{{RESOURCE}: 2, cpu: "2"}}
"""


def fake_node(root: Path) -> list[str]:
    """Four accelerators on two NUMA nodes; the generic plugin's argv for them."""
    host = FakeHost(root / "host")
    for minor in range(4):
        node = host.node(f"/dev/accel{minor}", major=261, minor=minor)
        pci = f"pci0000:00/0000:00:0{minor}.0"
        host.sys_device(pci, numa_node=minor // 2)
        host.sys_device(f"{pci}/accel/accel{minor}", {"dev": f"261:{minor}"}, dev=node)
    config = root / "generic.yaml"
    config.write_text(textwrap.dedent(CONFIG))
    return [
        "generic",
        "--config",
        str(config),
        "--dev-root",
        str(host.dev),
        "--sys-root",
        str(host.sys),
        "--udev-source",
        "off",
        "--metrics-address",
        "",
    ]


class Processes:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[asyncio.subprocess.Process] = []

    async def spawn(self, name: str, *argv: str) -> asyncio.subprocess.Process:
        with (self.logs / f"{name}.log").open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "accel_plugins.cli.main",
                *argv,
                cwd=ROOT,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        self.procs.append(proc)
        return proc

    def output(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[Processes]:
    running = Processes(tmp_path)
    yield running
    for proc in running.procs:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()


async def admit(
    processes: Processes, kubelet_dir: Path, tmp_path: Path, pod_text: str, *flags: str
) -> tuple[int, str]:
    plugin_argv = fake_node(tmp_path)
    pod = tmp_path / "pod.yaml"
    pod.write_text(pod_text)
    kubelet = await processes.spawn(
        "kubelet",
        "kubelet",
        "--plugin-dir",
        str(kubelet_dir),
        "--admit",
        str(pod),
        "--once",
        "--numa-nodes",
        "0,1",
        "--admit-timeout",
        str(START_TIMEOUT),
        *flags,
    )
    await processes.spawn(
        "plugin",
        *plugin_argv,
        "--plugin-dir",
        str(kubelet_dir),
        "--pod-resources-socket",
        str(kubelet_dir / "no-pod-resources.sock"),
    )
    code = await asyncio.wait_for(kubelet.wait(), START_TIMEOUT + 20)
    return code, processes.output("kubelet")


async def test_admit_once_against_the_generic_plugin(
    processes: Processes, kubelet_dir: Path, tmp_path: Path
) -> None:
    code, out = await admit(
        processes, kubelet_dir, tmp_path, POD, "--topology-policy", "single-numa-node"
    )

    assert code == 0, out + processes.output("plugin")
    # The generic plugin's device IDs are hashes: read them back from the checkpoint.
    stored = checkpoint.read(kubelet_dir / "kubelet_internal_checkpoint")
    assert [(r.container, [d.host_path for d in r.response.devices]) for r in stored] == [
        ("setup", ["/dev/accel0"]),
        ("main", ["/dev/accel0", "/dev/accel1"]),
    ]
    [accel0], (_, accel1) = stored[0].device_ids, stored[1].device_ids
    assert stored[1].device_ids[0] == accel0
    expected = [
        "pod default/trainer: admitted (topology policy single-numa-node, NUMA nodes 0,1)",
        "  init container setup:",
        f"    topology hints for {RESOURCE}: 0 (preferred), 1 (preferred), 0,1",
        "    NUMA affinity: 0 (preferred)",
        f"    {RESOURCE}: {accel0}",
        f"      {accel0}: preferred by the plugin",
        "      device specs:",
        "        /dev/accel0 -> /dev/accel0 (mrw)",
        "  container main:",
        # The init container's accel0 may be reused, so node 1 alone cannot hold the request.
        f"    topology hints for {RESOURCE}: 0 (preferred), 0,1",
        "    NUMA affinity: 0 (preferred)",
        f"    {RESOURCE}: {accel0}, {accel1}",
        f"      {accel0}: reused from the init containers",
        f"      {accel1}: on the affinity's NUMA nodes",
        "        /dev/accel1 -> /dev/accel1 (mrw)",
    ]
    lines = out.splitlines()
    for line in expected:
        assert line in lines, out
    assert lines.index(expected[1]) < lines.index(expected[8])
    assert f"checkpoint: {kubelet_dir / 'kubelet_internal_checkpoint'} (2 allocations)" in lines


async def test_a_rejected_pod_exits_1(
    processes: Processes, kubelet_dir: Path, tmp_path: Path
) -> None:
    # Three accelerators for the main container cannot come from one NUMA node.
    three = POD.replace(f"{RESOURCE}: 2,", f"{RESOURCE}: 3,")

    code, out = await admit(
        processes, kubelet_dir, tmp_path, three, "--topology-policy", "single-numa-node"
    )

    assert code == 1, out
    assert (
        "pod default/trainer: rejected: TopologyAffinityError: Pod was rejected: Resources "
        "cannot be allocated with Topology locality (topology policy single-numa-node, "
        "NUMA nodes 0,1)"
    ) in out.splitlines()
    assert checkpoint.read(kubelet_dir / "kubelet_internal_checkpoint") == []


PARSE_ERRORS = {
    "not a pod": ("kind: Service\n", "kind: expected Pod, got 'Service'"),
    "a bad quantity": (
        "metadata: {name: p}\nspec: {containers: [{name: c, resources: "
        "{limits: {example.com/w: lots}}}]}\n",
        "spec.containers[0].resources.limits[example.com/w]: 'lots' is not a quantity",
    ),
    "no containers": ("metadata: {name: p}\nspec: {}\n", "spec.containers: expected a list"),
}


@pytest.mark.parametrize(("text", "reason"), PARSE_ERRORS.values(), ids=PARSE_ERRORS)
def test_pod_manifest_errors_exit_2_before_anything_starts(
    kubelet_dir: Path, tmp_path: Path, text: str, reason: str
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(text)

    result = run_cli("kubelet", "--plugin-dir", str(kubelet_dir), "--admit", str(pod), "--once")

    assert result.returncode == 2
    assert result.stderr.startswith(f"accel-plugins kubelet: configuration error: {pod}: {reason}")
    assert not (kubelet_dir / "kubelet.sock").exists()


FLAG_ERRORS = {
    "once without admit": (["--once"], "--once: needs --admit"),
    "bad NUMA nodes": (["--numa-nodes", "0,x"], "--numa-nodes: '0,x' is not a list of NUMA"),
}


@pytest.mark.parametrize(("flags", "reason"), FLAG_ERRORS.values(), ids=FLAG_ERRORS)
def test_flag_errors_exit_2(
    kubelet_dir: Path, tmp_path: Path, flags: list[str], reason: str
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("metadata: {name: p}\nspec: {containers: [{name: c}]}\n")
    admit = [] if flags == ["--once"] else ["--admit", str(pod)]

    result = run_cli("kubelet", "--plugin-dir", str(kubelet_dir), *admit, *flags)

    assert result.returncode == 2
    assert f"accel-plugins kubelet: configuration error: {reason}" in result.stderr


def test_a_pod_without_extended_resources_is_admitted_at_once(
    kubelet_dir: Path, tmp_path: Path
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("metadata: {name: web}\nspec: {containers: [{name: nginx}]}\n")

    result = run_cli("kubelet", "--plugin-dir", str(kubelet_dir), "--admit", str(pod), "--once")

    assert result.returncode == 0, result.stderr
    assert "pod default/web: admitted (topology policy none," in result.stdout
    assert "  container nginx:\n    no extended resources" in result.stdout
