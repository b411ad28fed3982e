"""NVIDIA with a CDI strategy, end to end: the specs on disk and the names the kubelet gets.

The backend is built as ``accel-plugins nvidia`` builds it (the factory, from option
values), on a simulated node with a fake driver root; real sockets and gRPC. Every CDI
name in an Allocate answer must be a device of a spec file on disk (else the runtime
refuses the container), every spec file passes the CDI schema, and the files are gone
once the plugin stops. Where podman >= 4.1 can run a container, it applies a spec.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.nvidia.factory import backend_factory
from accel_plugins.kubelet_emulator import Kubelet
from accel_plugins.plugin.cdi import CdiDevice, CdiSpec, CdiSpecWriter, ContainerEdits
from accel_plugins.plugin.device import DeviceNode
from accel_plugins.testing import FakeHost
from tests.fixtures.framework import StartManager
from tests.support.cdi import assert_valid_spec_file, fake_driver_root

VENDOR = "k8s.device-plugin.nvidia.com"


def options(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    root = fake_driver_root(tmp_path / "driver")
    return {
        "simulate": "pcie-4gpu",
        "device_list_strategy": ("cdi-annotations", "cdi-cri"),
        "cdi_spec_dir": str(tmp_path / "cdi"),
        "nvidia_driver_root": str(root),
    } | extra


def devices_on_disk(spec_dir: Path) -> set[str]:
    names: set[str] = set()
    for path in spec_dir.glob("*.json"):
        spec = assert_valid_spec_file(path)
        names |= {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    return names


@pytest.mark.parametrize(
    ("extra", "resource", "pattern"),
    [
        pytest.param({}, "nvidia.com/gpu", rf"^{VENDOR}/gpu=GPU-[0-9a-f-]+$", id="uuid"),
        pytest.param(
            {"device_id_strategy": "index"}, "nvidia.com/gpu", rf"^{VENDOR}/gpu=\d$", id="index"
        ),
        pytest.param(
            {"simulate": "a100-mig", "mig_strategy": "mixed", "device_id_strategy": "index"},
            "nvidia.com/mig-1g.5gb",
            rf"^{VENDOR}/gpu=\d:\d$",
            id="mig-index",
        ),
    ],
)
async def test_every_cdi_name_the_kubelet_gets_is_in_a_spec_on_disk(
    tmp_path: Path,
    kubelet: Kubelet,
    start_manager: StartManager,
    extra: dict[str, Any],
    resource: str,
    pattern: str,
) -> None:
    opts = options(tmp_path, **extra)
    spec_dir = Path(opts["cdi_spec_dir"])
    running = await start_manager(backend_factory(opts, {}))
    await kubelet.wait_for_resource(resource)
    record = await kubelet.allocate("pod", "main", resource, 1)
    (name,) = record.response.cdi_devices
    assert re.match(pattern, name)
    assert name in devices_on_disk(spec_dir)
    [(key, value)] = record.response.annotations.items()
    assert key.startswith("cdi.k8s.io/nvidia-device-plugin_")
    assert value == name
    assert record.response.devices == ()  # injected by the spec, once
    await running.manager.stop()
    assert list(spec_dir.iterdir()) == []  # no stale spec once nobody serves the devices


async def test_in_dra_mode_the_spec_outlives_the_plugin(
    tmp_path: Path, kubelet: Kubelet, start_manager: StartManager
) -> None:
    """A prepared claim names the devices of this spec: a container of it restarting
    while the plugin is away (an upgrade, a crash) must still find them, as it finds a
    claim's own spec (docs/dra.md, "Prepared claims outlive the process")."""
    opts = options(tmp_path)
    spec_dir = Path(opts["cdi_spec_dir"])
    running = await start_manager(backend_factory(opts, {}, dra_cdi_dir=str(spec_dir)))
    await kubelet.wait_for_resource("nvidia.com/gpu")
    written = devices_on_disk(spec_dir)
    assert written
    await running.manager.stop()
    assert devices_on_disk(spec_dir) == written


async def test_imex_channels_get_their_own_spec(
    tmp_path: Path, kubelet: Kubelet, start_manager: StartManager
) -> None:
    dev = FakeHost(tmp_path / "dev")
    dev.node("/dev/nvidia-caps-imex-channels/channel0", major=509, minor=0)
    opts = options(tmp_path, nvidia_dev_root=str(dev.root), imex_channel_ids=(0,))
    await start_manager(backend_factory(opts, {}))
    await kubelet.wait_for_resource("nvidia.com/gpu")
    record = await kubelet.allocate("pod", "main", "nvidia.com/gpu", 1)
    assert record.response.cdi_devices[-1] == f"{VENDOR}/imex-channel=0"
    assert set(record.response.cdi_devices) <= devices_on_disk(Path(opts["cdi_spec_dir"]))


def test_without_a_cdi_strategy_no_spec_is_written(tmp_path: Path) -> None:
    opts = options(tmp_path, device_list_strategy=("envvar",))
    backend = backend_factory(opts, {})()
    assert getattr(backend, "cdi", "missing") is None


# -- a real CDI consumer ------------------------------------------------------------------


def _podman_version() -> tuple[int, ...] | None:
    podman = shutil.which("podman")
    if podman is None:
        return None
    out = subprocess.run([podman, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"(\d+)\.(\d+)", out.stdout)
    return (int(found[1]), int(found[2])) if found else None


def test_podman_applies_a_written_spec(tmp_path: Path) -> None:
    """podman >= 4.1 reads CDI specs (``--device vendor/class=name``): a spec written here
    puts its device node and environment into a container."""
    version = _podman_version()
    if version is None or version < (4, 1):
        pytest.skip(f"needs podman >= 4.1 (found {version or 'none'})")
    images = subprocess.run(
        ["podman", "image", "exists", "busybox"], capture_output=True, check=False
    )
    if images.returncode != 0:
        pytest.skip("podman has no busybox image here, and tests do not pull one")
    spec_dir = tmp_path / "cdi"
    spec = CdiSpec(
        "example.accel-plugins.io/check",
        (
            CdiDevice(
                "null0",
                ContainerEdits(
                    env=("ACCEL_CDI=applied",),
                    device_nodes=(DeviceNode("/dev/null", "/dev/accel-null", "rw"),),
                ),
            ),
        ),
    )
    CdiSpecWriter(spec_dir).sync([spec])
    run = subprocess.run(
        [
            "podman",
            "--cdi-spec-dir",
            str(spec_dir),
            "run",
            "--rm",
            "--device",
            "example.accel-plugins.io/check=null0",
            "busybox",
            "sh",
            "-c",
            "test -c /dev/accel-null && echo $ACCEL_CDI",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0 and "cdi-spec-dir" in run.stderr:
        pytest.skip(f"this podman cannot take --cdi-spec-dir: {run.stderr.strip()}")
    if run.returncode != 0 and re.search(r"cgroup|namespace|permission", run.stderr, re.I):
        pytest.skip(f"podman cannot run containers here: {run.stderr.strip()[:200]}")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "applied"
    assert json.loads((spec_dir / spec.file_name).read_text())["kind"] == spec.kind
