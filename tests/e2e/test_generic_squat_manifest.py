"""squat's shipped DaemonSet config, unchanged, through our generic plugin and the kubelet.

The container args of squat's manifests/generic-device-plugin.yaml (five
``--device`` documents, tests/support/squat.py) run as they are:
``accel-plugins generic <args>``, a process of its own; the same documents also
become one config file's ``devices``. The node's /dev is a fake tree in tmp_path
(``--dev-root``), the kubelet is the emulator, the calls are real gRPC over unix
sockets. The resource names (``squat.ai/...``) and device IDs are the ones
squat's plugin registers.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import load_config
from accel_plugins.backends.generic.discovery import device_id
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.kubelet_emulator.model import DeviceSpec
from tests.fixtures.framework import StartManager
from tests.fixtures.generic import FakeHost
from tests.support.cdi import assert_valid_spec_file
from tests.support.cli import free_port, http_get
from tests.support.squat import DAEMONSET_CONTAINER_ARGS, build_node_dev, squat_config_text

# What squat's plugin offers on that node: one serial per adapter, the camera,
# FUSE and the sound directory ten times each, and the capture groups whose
# nodes exist (cards 0 and 1).
EXPECTED = {
    "squat.ai/serial": 2,
    "squat.ai/video": 1,
    "squat.ai/fuse": 10,
    "squat.ai/audio": 10,
    "squat.ai/capture": 2,
}


def factory(host: FakeHost, tmp_path: Path, **settings: Any) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(squat_config_text())
    config = load_config(path)
    values = host.settings(domain="squat.ai", **settings)
    return lambda: GenericBackend(config, values)


async def test_squats_daemonset_devices_register_healthy_and_allocate(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost, tmp_path: Path
) -> None:
    build_node_dev(fake_host)
    await start_manager(factory(fake_host, tmp_path))
    for resource, count in EXPECTED.items():
        view = await kubelet.wait_for_resource(resource, allocatable=count)
        assert view.unhealthy == []
    audio = kubelet.resources["squat.ai/audio"]
    assert audio.healthy == sorted(device_id(j, ["/dev/snd"]) for j in range(10))

    # The directory goes to the container as squat hands it: one DeviceSpec;
    # the runtime (containerd's oci.WithDevices) creates the nodes inside.
    record = await kubelet.allocate("player", "main", "squat.ai/audio", 1)
    assert record.response.devices == (DeviceSpec("/dev/snd", "/dev/snd", "mrw"),)

    # Card 1's capture nodes appear in the container under card 0's names.
    capture = kubelet.resources["squat.ai/capture"].healthy
    card1 = device_id(0, ["/dev/snd/controlC1", "/dev/snd/pcmC1D0c"])
    assert card1 in capture
    record = await kubelet.allocate("rec", "main", "squat.ai/capture", 1, must_include=[card1])
    assert record.response.devices == (
        DeviceSpec("/dev/snd/controlC0", "/dev/snd/controlC1", "mrw"),
        DeviceSpec("/dev/snd/pcmC0D0c", "/dev/snd/pcmC1D0c", "mrw"),
    )


async def test_a_node_added_inside_the_directory_reaches_the_cdi_spec(
    kubelet: Kubelet, start_manager: StartManager, fake_host: FakeHost, tmp_path: Path
) -> None:
    build_node_dev(fake_host)
    cdi_dir = tmp_path / "cdi"
    await start_manager(factory(fake_host, tmp_path, cdi_spec_dir=cdi_dir))
    await kubelet.wait_for_resource("squat.ai/audio", allocatable=10)
    spec_file = cdi_dir / "squat.ai-audio.json"

    def audio_nodes() -> list[str]:
        spec = json.loads(spec_file.read_text())
        return [
            n.get("hostPath", n["path"])
            for n in spec["devices"][0]["containerEdits"]["deviceNodes"]
        ]

    # Valid CDI: every deviceNodes entry a node (CDI's library refuses a directory).
    assert_valid_spec_file(spec_file)
    assert "/dev/snd/controlC1" in audio_nodes()
    assert "/dev/snd/pcmC0D0c" in audio_nodes()
    fake_host.node("/dev/snd/hwC2D0", major=116, minor=9)  # a third card arrives
    # No ListAndWatch change to wait on (the device is the same): poll the file.
    for _ in range(500):
        if "/dev/snd/hwC2D0" in audio_nodes():
            break
        await asyncio.sleep(0.01)
    assert "/dev/snd/hwC2D0" in audio_nodes()


async def test_the_command_line_serves_it_as_an_operator_runs_it(
    kubelet: Kubelet, kubelet_dir: Path, fake_host: FakeHost, tmp_path: Path
) -> None:
    """``accel-plugins generic --config FILE --domain squat.ai``, a process of its own."""
    build_node_dev(fake_host)
    config = tmp_path / "config.yaml"
    config.write_text(squat_config_text())
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "accel_plugins.cli.main", "generic",
        f"--config={config}", "--domain=squat.ai", f"--plugin-dir={kubelet_dir}",
        f"--dev-root={fake_host.dev}", f"--sys-root={fake_host.sys}", "--udev-source=off",
        "--metrics-address=", f"--pod-resources-socket={tmp_path / 'none.sock'}",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        for resource, count in EXPECTED.items():
            await kubelet.wait_for_resource(resource, allocatable=count, timeout=15)
        record = await kubelet.allocate("player", "main", "squat.ai/audio", 2)
        # Two replicas of one directory: the container gets it once.
        assert record.response.devices == (DeviceSpec("/dev/snd", "/dev/snd", "mrw"),)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=10)
    assert process.returncode == 0, stderr.decode()


async def test_squats_daemonset_args_run_unchanged(
    kubelet: Kubelet, kubelet_dir: Path, fake_host: FakeHost, tmp_path: Path
) -> None:
    """``accel-plugins generic`` + the manifest's args verbatim; what follows them only points
    the process at this test's node (squat's own spellings where it has one)."""
    build_node_dev(fake_host)
    port = free_port()
    node = [
        f"--plugin-directory={kubelet_dir}",  # the DaemonSet's hostPath mount
        f"--listen=127.0.0.1:{port}",  # squat's default is :8080
        f"--dev-root={fake_host.dev}",  # the DaemonSet mounts the host's /dev at /dev
        f"--sys-root={fake_host.sys}",
        "--udev-source=off",  # no uevents from a fake /dev
        f"--pod-resources-socket={tmp_path / 'none.sock'}",
    ]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "accel_plugins.cli.main", "generic", *DAEMONSET_CONTAINER_ARGS, *node,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        for resource, count in EXPECTED.items():
            view = await kubelet.wait_for_resource(resource, allocatable=count, timeout=15)
            assert view.unhealthy == []
        assert sorted(kubelet.resources) == sorted(EXPECTED)
        fuse = await kubelet.allocate("fuse", "main", "squat.ai/fuse", 1)
        assert fuse.response.devices == (DeviceSpec("/dev/fuse", "/dev/fuse", "mrw"),)
        card1 = device_id(0, ["/dev/snd/controlC1", "/dev/snd/pcmC1D0c"])
        record = await kubelet.allocate("rec", "main", "squat.ai/capture", 1, must_include=[card1])
        assert record.response.devices == (
            DeviceSpec("/dev/snd/controlC0", "/dev/snd/controlC1", "mrw"),
            DeviceSpec("/dev/snd/pcmC0D0c", "/dev/snd/pcmC1D0c", "mrw"),
        )
        # --listen serves our /healthz and /metrics (squat's: /health and its own series).
        assert await http_get(port, "/healthz") == (200, "ok\n")
        status, metrics = await http_get(port, "/metrics")
        assert status == 200
        assert 'resource="squat.ai/capture"' in metrics
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=10)
    assert process.returncode == 0, stderr.decode()
