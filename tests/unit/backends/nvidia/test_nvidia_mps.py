"""MPS sharing: which devices it shares, what NVIDIA refuses, the daemon's limits, Allocate.

Sources, in github.com/NVIDIA/k8s-device-plugin (the case names say which):

- ``internal/rm/rm_test.go`` TestValidateRequest: the MPS rows
  (failRequestsGreaterThanOne; in a file it defaults to true, ``api/config/v1/config.go``).
- ``cmd/mps-control-daemon/mps/daemon.go`` Start: the limits each daemon is given
  (pinned memory = total / replicas in MiB per GPU index, thread percentage = 100 /
  replicas), ``root.go``: the layout under the MPS root.
- ``internal/plugin/mps.go`` updateReponse and ``server.go`` getAllocateResponse: what
  a container gets for an MPS replica (the golden table).
- ``internal/plugin/mps.go`` getMPSOptions: MIG devices refused.

The daemon and the readiness watch run here for real (the fake control program as a
child process, inotify on a temp root); tests/reliability/test_mps_process.py runs
both commands as processes against the kubelet emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import textwrap
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.config.config import (
    NvidiaSettings,
    Overrides,
    load_config_file,
    resolve,
)
from accel_plugins.backends.nvidia.container_contract import generated_mig_minors
from accel_plugins.backends.nvidia.facts import gpu_facts
from accel_plugins.backends.nvidia.mps.fake_mps_control import COMMANDS_FILE, PID_FILE
from accel_plugins.backends.nvidia.mps.mps_control import MpsControl, MpsControlError, fake_program
from accel_plugins.backends.nvidia.mps.mps_daemon import Daemons
from accel_plugins.backends.nvidia.mps.mps_lock import DaemonLock, daemon_alive
from accel_plugins.backends.nvidia.mps.mps_plan import DaemonPlan, SharedGpu, daemon_plans
from accel_plugins.backends.nvidia.mps.mps_readiness import MpsReadiness
from accel_plugins.backends.nvidia.mps.mps_root import MpsRoot
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml
from accel_plugins.cli.main import main
from accel_plugins.errors import AllocationError, ConfigError
from accel_plugins.plugin.device import ContainerAllocation, Device, Health, Mount
from tests.fixtures.nvidia import profile

MIG_SINGLE = {"gpus": [{"name": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960, "mig": ["3g.20gb"]}]}


def configured(
    tmp_path: Path, text: str, *, mig: str = "none", strategies: tuple[str, ...] = ("envvar",)
) -> NvidiaSettings:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\n" + textwrap.dedent(text))
    overrides = Overrides(
        mps_root=str(tmp_path / "mps"), mig_strategy=mig, device_list_strategy=strategies
    )
    return resolve(overrides, load_config_file(path))


def backend_for(
    settings: NvidiaSettings, spec: str | dict[str, Any] = "pcie-4gpu"
) -> NvidiaBackend:
    nvml = SimulatedNvml(profile(spec))
    return NvidiaBackend(
        nvml, settings, mig_minors=generated_mig_minors(len(nvml.profile.gpus)), wait_ms=50
    )


def built(backend: NvidiaBackend) -> dict[str, list[Device]]:
    return backend.build(backend.check())


def shape(tree: dict[str, list[Device]]) -> dict[str, list[str]]:
    def short(device: Device) -> str:
        facts = gpu_facts(device)
        return facts.index if facts.replica is None else f"{facts.index}::{facts.replica}"

    return {name: [short(d) for d in devices] for name, devices in sorted(tree.items())}


# -- which devices MPS shares --------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected", "mps"),
    [
        pytest.param(
            "sharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n",
            {"nvidia.com/gpu": [f"{g}::{n}" for g in range(4) for n in range(2)]},
            {"nvidia.com/gpu"},
            id="README-mps-every-gpu",
        ),
        pytest.param(
            "sharing:\n  mps:\n    renameByDefault: true\n    resources:\n"
            "    - {name: nvidia.com/gpu, replicas: 2}\n",
            {"nvidia.com/gpu.shared": [f"{g}::{n}" for g in range(4) for n in range(2)]},
            {"nvidia.com/gpu.shared"},
            id="README-mps-renamed",
        ),
        pytest.param(
            """\
            sharing:
              timeSlicing:
                resources:
                - {name: gpu, devices: [0], replicas: 2, rename: gpu.shared}
              mps:
                resources:
                - {name: gpu, devices: [1], replicas: 3, rename: gpu.mps}
            """,
            {
                "nvidia.com/gpu": ["2", "3"],
                "nvidia.com/gpu.mps": ["1::0", "1::1", "1::2"],
                "nvidia.com/gpu.shared": ["0::0", "0::1"],
            },
            {"nvidia.com/gpu.mps"},
            id="ours-time-sliced-gpu-beside-mps-gpu",
        ),
    ],
)
def test_mps_shares(
    tmp_path: Path, config: str, expected: dict[str, list[str]], mps: set[str]
) -> None:
    backend = backend_for(configured(tmp_path, config))
    assert shape(built(backend)) == expected
    assert backend.mps_resources == mps


@pytest.mark.parametrize(
    ("config", "field", "reason", "mig"),
    [
        pytest.param(
            """\
            sharing:
              timeSlicing: {resources: [{name: gpu, replicas: 2}]}
              mps: {resources: [{name: gpu, replicas: 2, rename: gpu.mps}]}
            """,
            "sharing.mps.resources[0].devices",
            "either time-sliced or MPS-shared",
            "none",
            id="one-gpu-time-sliced-and-mps-shared",
        ),
        pytest.param(
            """\
            sharing:
              timeSlicing: {resources: [{name: gpu, devices: [0], replicas: 2, rename: gpu.x}]}
              mps: {resources: [{name: gpu, devices: [1, 0], replicas: 2, rename: gpu.mps}]}
            """,
            "sharing.mps.resources[0].devices",
            "device 0 is already shared by sharing.timeSlicing.resources[0]",
            "none",
            id="listed-in-both-sections",
        ),
        pytest.param(
            """\
            sharing:
              timeSlicing: {resources: [{name: gpu, devices: [0], replicas: 2, rename: gpu.x}]}
              mps: {resources: [{name: gpu, devices: [1], replicas: 2, rename: gpu.x}]}
            """,
            "sharing.mps.resources[0].rename",
            "MPS replicas need a resource of their own",
            "none",
            id="one-name-for-time-sliced-and-mps-replicas",
        ),
        pytest.param(
            "sharing: {mps: {resources: [{name: gpu, devices: [1], replicas: 2}]}}\n",
            "sharing.mps.resources[0].rename",
            "would hold MPS replicas beside 3 other device(s)",
            "none",
            id="mps-replicas-beside-whole-gpus",
        ),
        pytest.param(
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n",
            "sharing.mps.resources[0].devices",
            "MIG device 0:0 cannot be shared with MPS",
            "single",
            id="mps.go-mig-devices-refused",
        ),
        pytest.param(
            "sharing: {mps: {resources: [{name: gpu, replicas: 49}]}}\n",
            "sharing.mps.resources[0].replicas",
            "at most 48 clients",
            "none",
            id="device_test.go-post-volta-clients-exceeded",
        ),
    ],
)
def test_mps_refused(tmp_path: Path, config: str, field: str, reason: str, mig: str) -> None:
    spec: str | dict[str, Any] = MIG_SINGLE if mig == "single" else "pcie-4gpu"
    with pytest.raises(ConfigError) as caught:
        built(backend_for(configured(tmp_path, config, mig=mig), spec))
    assert (caught.value.source, caught.value.field) == (str(tmp_path / "config.yaml"), field)
    assert reason in caught.value.reason


def test_post_volta_clients_max(tmp_path: Path) -> None:
    """device_test.go "post-volta clients max": 48 replicas are accepted."""
    config = "sharing: {mps: {resources: [{name: gpu, replicas: 48}]}}\n"
    assert len(built(backend_for(configured(tmp_path, config)))["nvidia.com/gpu"]) == 4 * 48


# -- rm_test.go TestValidateRequest, the MPS rows ------------------------------------------


@pytest.mark.parametrize(
    ("fail_over_one", "request_ids", "refused"),
    [
        pytest.param("", ["0::1"], False, id="MPS-with-single-device"),
        pytest.param("false", ["0::1", "1::0"], False, id="MPS-with-two-devices"),
        pytest.param(
            "true", ["0::1", "1::0"], True, id="MPS-with-two-devices--failRequestsGreaterThanOne"
        ),
        pytest.param("", ["0::1", "1::0"], True, id="config.go-a-file-defaults-to-true"),
    ],
)
def test_validate_request(
    tmp_path: Path, fail_over_one: str, request_ids: list[str], refused: bool
) -> None:
    extra = f"failRequestsGreaterThanOne: {fail_over_one}, " if fail_over_one else ""
    config = f"sharing: {{mps: {{{extra}resources: [{{name: gpu, replicas: 2}}]}}}}\n"
    backend = backend_for(configured(tmp_path, config))
    devices = {k: d for d, k in zip(*_keyed(built(backend)["nvidia.com/gpu"]), strict=True)}
    chosen = [devices[i] for i in request_ids]
    if refused:
        with pytest.raises(AllocationError, match="at most 1 per container"):
            backend.allocate("nvidia.com/gpu", chosen)
    else:
        backend.allocate("nvidia.com/gpu", chosen)


def _keyed(devices: list[Device]) -> tuple[list[Device], list[str]]:
    return devices, [f"{gpu_facts(d).index}::{gpu_facts(d).replica}" for d in devices]


# -- daemon.go: what each control daemon is told -------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(
            "sharing: {mps: {resources: [{name: gpu, replicas: 4}]}}\n",
            [
                DaemonPlan(
                    "nvidia.com/gpu",
                    tuple(SharedGpu(str(i), f"{{u{i}}}", 46068, 4) for i in range(4)),
                )
            ],
            id="daemon.go-every-gpu-4-replicas",
        ),
        pytest.param(
            """\
            sharing:
              mps:
                resources:
                - {name: gpu, devices: [2], replicas: 3, rename: gpu.mps}
                - {name: gpu, devices: [0, 1, 3], replicas: 5, rename: gpu.mps}
            """,
            [
                DaemonPlan(
                    "nvidia.com/gpu.mps",
                    (
                        SharedGpu("0", "{u0}", 46068, 5),
                        SharedGpu("1", "{u1}", 46068, 5),
                        SharedGpu("2", "{u2}", 46068, 3),
                        SharedGpu("3", "{u3}", 46068, 5),
                    ),
                )
            ],
            id="ours-per-gpu-replica-counts",
        ),
    ],
)
def test_daemon_plans(tmp_path: Path, config: str, expected: list[DaemonPlan]) -> None:
    backend = backend_for(configured(tmp_path, config))
    names = {gpu.uuid: f"{{u{i}}}" for i, gpu in enumerate(profile("pcie-4gpu").gpus)}
    plans = daemon_plans(built(backend), backend.mps_resources)
    readable = [
        DaemonPlan(
            p.resource,
            tuple(SharedGpu(g.index, names[g.uuid], g.memory_mib, g.replicas) for g in p.gpus),
        )
        for p in plans
    ]
    assert readable == expected


@pytest.mark.parametrize(
    ("gpus", "commands"),
    [
        pytest.param(
            (SharedGpu("0", "GPU-a", 46068, 4), SharedGpu("1", "GPU-b", 46068, 4)),
            [
                "set_default_device_pinned_mem_limit 0 11517M",
                "set_default_device_pinned_mem_limit 1 11517M",
                "set_default_active_thread_percentage 25",
            ],
            id="daemon.go-memory-then-threads",
        ),
        pytest.param(
            (SharedGpu("0", "GPU-a", 40960, 3),),
            [
                "set_default_device_pinned_mem_limit 0 13653M",
                "set_default_active_thread_percentage 33",
            ],
            id="daemon.go-integer-division",
        ),
        pytest.param(
            (SharedGpu("0", "GPU-a", 0, 2),),
            ["set_default_active_thread_percentage 50"],
            id="daemon.go-no-memory-no-memory-limit",
        ),
        pytest.param(
            (SharedGpu("0", "GPU-a", 1000, 2), SharedGpu("1", "GPU-b", 1000, 5)),
            [
                "set_default_device_pinned_mem_limit 0 500M",
                "set_default_device_pinned_mem_limit 1 200M",
                "set_default_active_thread_percentage 20",
            ],
            id="ours-the-largest-count-sets-the-percentage",
        ),
    ],
)
def test_daemon_commands(gpus: tuple[SharedGpu, ...], commands: list[str]) -> None:
    assert DaemonPlan("nvidia.com/gpu", gpus).commands() == commands


# -- Allocate: mps.go updateReponse, the golden table ---------------------------------------

STRATEGY_ANSWERS = [
    pytest.param(
        ("envvar",),
        ContainerAllocation(
            mounts=(
                Mount("{root}/nvidia.com/gpu/pipe", "/mps/nvidia.com/gpu/pipe"),
                Mount("{root}/shm", "/dev/shm"),
            ),
            envs={
                "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe",
                "NVIDIA_VISIBLE_DEVICES": "{u1}",
            },
        ),
        id="envvar",
    ),
    pytest.param(
        ("volume-mounts",),
        ContainerAllocation(
            mounts=(
                Mount("{root}/nvidia.com/gpu/pipe", "/mps/nvidia.com/gpu/pipe"),
                Mount("{root}/shm", "/dev/shm"),
                Mount("/dev/null", "/var/run/nvidia-container-devices/{u1}"),
            ),
            envs={
                "CUDA_MPS_PIPE_DIRECTORY": "/mps/nvidia.com/gpu/pipe",
                "NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices",
            },
        ),
        id="volume-mounts-after-the-mps-mounts",
    ),
]


def _filled(allocation: ContainerAllocation, values: dict[str, str]) -> ContainerAllocation:
    def fill(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    return ContainerAllocation(
        nodes=allocation.nodes,
        mounts=tuple(Mount(fill(m.host_path), fill(m.container_path)) for m in allocation.mounts),
        envs={k: fill(v) for k, v in allocation.envs.items()},
        annotations=allocation.annotations,
        cdi_devices=allocation.cdi_devices,
    )


@pytest.mark.parametrize(("strategies", "golden"), STRATEGY_ANSWERS)
def test_allocate_an_mps_replica(
    tmp_path: Path, strategies: tuple[str, ...], golden: ContainerAllocation
) -> None:
    config = "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n"
    backend = backend_for(configured(tmp_path, config, strategies=strategies))
    replica = built(backend)["nvidia.com/gpu"][3]  # GPU 1's second replica
    values = {"{root}": str(tmp_path / "mps"), "{u1}": gpu_facts(replica).uuid}
    assert backend.allocate("nvidia.com/gpu", [replica]) == _filled(golden, values)


def test_allocate_cdi_only_still_gets_the_mps_contract(tmp_path: Path) -> None:
    """server.go adds the MPS answer before it returns early for CDI-only strategies."""
    config = "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n"
    backend = backend_for(configured(tmp_path, config, strategies=("cdi-cri",)))
    answer = backend.allocate("nvidia.com/gpu", built(backend)["nvidia.com/gpu"][:1])
    assert answer.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert answer.mounts[:2] == (
        Mount(f"{tmp_path}/mps/nvidia.com/gpu/pipe", "/mps/nvidia.com/gpu/pipe"),
        Mount(f"{tmp_path}/mps/shm", "/dev/shm"),
    )
    assert "NVIDIA_VISIBLE_DEVICES" not in answer.envs


def test_time_sliced_replicas_get_no_mps_contract(tmp_path: Path) -> None:
    config = """\
    sharing:
      timeSlicing: {resources: [{name: gpu, devices: [0], replicas: 2, rename: gpu.shared}]}
      mps: {resources: [{name: gpu, devices: [1], replicas: 2, rename: gpu.mps}]}
    """
    backend = backend_for(configured(tmp_path, config))
    tree = built(backend)
    sliced = backend.allocate("nvidia.com/gpu.shared", tree["nvidia.com/gpu.shared"][:1])
    assert "CUDA_MPS_PIPE_DIRECTORY" not in sliced.envs
    assert sliced.mounts == ()
    mps = backend.allocate("nvidia.com/gpu.mps", tree["nvidia.com/gpu.mps"][:1])
    assert mps.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu.mps/pipe"


# -- readiness: the plugin follows the daemon's files (inotify) -----------------------------


async def test_readiness_follows_started_files(tmp_path: Path) -> None:
    root = MpsRoot(tmp_path / "mps")
    changed = asyncio.Event()
    readiness = MpsReadiness(root, ["nvidia.com/gpu"], changed.set)
    task = asyncio.create_task(readiness.run())
    lock = DaemonLock(root.path)
    try:
        assert not readiness.is_ready("nvidia.com/gpu")
        # What the daemon does: its life lock, directories, .started, then .ready.
        assert lock.try_acquire()
        root.pipe_dir("nvidia.com/gpu").mkdir(parents=True)
        root.started_file("nvidia.com/gpu").touch()
        root.ready_file.touch()
        async with asyncio.timeout(5):
            await changed.wait()
        assert readiness.is_ready("nvidia.com/gpu")
        changed.clear()
        root.started_file("nvidia.com/gpu").unlink()  # a control program died
        async with asyncio.timeout(5):
            await changed.wait()
        assert not readiness.is_ready("nvidia.com/gpu")
    finally:
        lock.release()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize(
    ("lock_held", "started", "ready"),
    [
        pytest.param(True, True, True, id="daemon-up-and-started"),
        pytest.param(False, True, False, id="started-left-by-a-killed-daemon"),
        pytest.param(True, False, False, id="daemon-up-control-program-not-started"),
        pytest.param(False, False, False, id="nothing"),
    ],
)
def test_ready_needs_both_started_file_and_life_lock(
    tmp_path: Path, lock_held: bool, started: bool, ready: bool
) -> None:
    root = MpsRoot(tmp_path / "mps")
    root.resource_dir("nvidia.com/gpu").mkdir(parents=True)
    if started:
        root.started_file("nvidia.com/gpu").touch()
    lock = DaemonLock(root.path)
    if lock_held:
        assert lock.try_acquire()
    try:
        readiness = MpsReadiness(root, ["nvidia.com/gpu"], lambda: None)
        assert readiness.is_ready("nvidia.com/gpu") is ready
        assert readiness.daemon_running is lock_held
    finally:
        lock.release()


def test_life_lock_probe_never_takes_it_from_the_daemon(tmp_path: Path) -> None:
    """flock, not fcntl record locks: the probe's close must not drop the holder's lock."""
    assert not daemon_alive(tmp_path)  # no file: no daemon
    lock = DaemonLock(tmp_path)
    assert lock.try_acquire()
    assert daemon_alive(tmp_path)
    assert daemon_alive(tmp_path)  # still held after a probe opened and closed the file
    second = DaemonLock(tmp_path)
    assert not second.try_acquire()  # one daemon per root
    lock.release()
    assert not daemon_alive(tmp_path)
    assert second.try_acquire()
    second.release()


async def test_backend_marks_mps_replicas_unhealthy_while_not_ready(
    tmp_path: Path, run_nvidia: Any
) -> None:
    config = """\
    sharing:
      timeSlicing: {resources: [{name: gpu, devices: [0], replicas: 2, rename: gpu.shared}]}
      mps: {resources: [{name: gpu, devices: [1], replicas: 2, rename: gpu.mps}]}
    """
    root = MpsRoot(tmp_path / "mps")
    recorder = await run_nvidia(backend_for(configured(tmp_path, config)))

    def health(tree: Any, name: str) -> set[Health]:
        return {d.health for d in tree[name].values()}

    first = recorder.latest
    assert health(first, "nvidia.com/gpu.mps") == {Health.UNHEALTHY}  # listed, not removed
    assert health(first, "nvidia.com/gpu.shared") == {Health.HEALTHY}
    lock = DaemonLock(root.path)
    assert lock.try_acquire()
    try:
        root.resource_dir("nvidia.com/gpu.mps").mkdir(parents=True)
        root.started_file("nvidia.com/gpu.mps").touch()
        root.ready_file.touch()
        await recorder.wait_for(lambda t: health(t, "nvidia.com/gpu.mps") == {Health.HEALTHY})
        root.started_file("nvidia.com/gpu.mps").unlink()
        root.ready_file.unlink()
        await recorder.wait_for(lambda t: health(t, "nvidia.com/gpu.mps") == {Health.UNHEALTHY})
        assert {str(d.reason) for d in recorder.latest["nvidia.com/gpu.mps"].values()} == {
            "other: the MPS control daemon is not ready"
        }
        root.started_file("nvidia.com/gpu.mps").touch()
        await recorder.wait_for(lambda t: health(t, "nvidia.com/gpu.mps") == {Health.HEALTHY})
    finally:
        lock.release()  # the daemon died: its files stay, its lock does not
    await recorder.wait_for(lambda t: health(t, "nvidia.com/gpu.mps") == {Health.UNHEALTHY})
    assert {str(d.reason) for d in recorder.latest["nvidia.com/gpu.mps"].values()} == {
        "other: no MPS control daemon is running"
    }
    assert len(recorder.latest["nvidia.com/gpu.mps"]) == 2


# -- the daemon, with the fake control program as its child -------------------------------


async def _until(changed: asyncio.Event, check: Any) -> None:
    async with asyncio.timeout(20):
        while not check():
            changed.clear()
            await changed.wait()


async def test_daemon_starts_restarts_and_quits(tmp_path: Path) -> None:
    plan = DaemonPlan("nvidia.com/gpu", (SharedGpu("0", "GPU-a", 1000, 2),))
    root = MpsRoot(tmp_path / "mps")
    running = Daemons([plan], root, fake_program(), first_backoff=0.05)
    stop = asyncio.Event()
    task = asyncio.create_task(running.run(stop))
    changed = asyncio.Event()
    readiness = MpsReadiness(root, ["nvidia.com/gpu"], changed.set)
    watch = asyncio.create_task(readiness.run())
    try:
        await _until(changed, lambda: readiness.is_ready("nvidia.com/gpu"))
        assert root.ready_file.exists()
        pid_file = root.pipe_dir("nvidia.com/gpu") / PID_FILE
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        await _until(changed, lambda: not readiness.is_ready("nvidia.com/gpu"))
        await _until(changed, lambda: readiness.is_ready("nvidia.com/gpu"))
        assert running.supervisors[0].starts == 2
    finally:
        stop.set()
        async with asyncio.timeout(20):
            await task
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    assert not root.ready_file.exists()
    assert not root.started_file("nvidia.com/gpu").exists()
    commands = (root.log_dir("nvidia.com/gpu") / COMMANDS_FILE).read_text().splitlines()
    health = "get_default_active_thread_percentage"
    limits = [
        "set_default_device_pinned_mem_limit 0 500M",
        "set_default_active_thread_percentage 50",
    ]
    # Each start: NVIDIA's health query once the daemon answers, then the limits; on
    # stop, quit. (The killed daemon and the missing one refuse connections: unrecorded.)
    assert commands == [health, *limits, health, *limits, "quit"]


# -- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        pytest.param("sharing: {mps: {resources: [{name: gpu, replicas: 1}]}}\n", id="replicas-1"),
        pytest.param(
            "sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 2}]}\n"
            "  mps: {resources: [{name: gpu, replicas: 2, rename: gpu.mps}]}\n",
            id="time-sliced-and-mps-shared",
        ),
    ],
)
def test_the_daemon_refuses_what_the_plugin_refuses(
    tmp_path: Path, config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    common = ["--simulate", "pcie-4gpu", "--config", str(path), "--mps-root", str(tmp_path)]
    for command in ("mps-control-daemon", "nvidia"):
        assert main([command, *common]) == 2
        assert f"accel-plugins {command}: configuration error: {path}" in capsys.readouterr().err


async def test_the_fake_detaches_like_the_real_program(tmp_path: Path) -> None:
    """``-d`` (how NVIDIA starts it) returns once the daemon listens; the client reaches it."""
    control = MpsControl(fake_program(), tmp_path / "pipe", tmp_path / "log")
    proc = await asyncio.create_subprocess_exec(*control.program, "-d", env=control.env)
    assert await proc.wait() == 0
    await control.send("set_default_active_thread_percentage 25")
    assert await control.send("get_default_active_thread_percentage") == "25.0\n"
    await control.send("quit")
    with pytest.raises(MpsControlError, match="Cannot find MPS control daemon"):
        await control.send("get_default_active_thread_percentage")
