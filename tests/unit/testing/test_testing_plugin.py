"""accel_plugins.testing: the pytest plugin vendors test their backends with.

These tests use the plugin's own fixtures (accel_host, accel_kubelet,
accel_serve), as a third party would, and check in a fresh pytest process that
the plugin loads through its entry point and stays cheap to import.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from accel_plugins.errors import ConfigError, InvalidSnapshotError
from accel_plugins.kubelet_emulator import DeviceSpec, Kubelet
from accel_plugins.plugin import (
    BackendCommand,
    BackendContext,
    BackendFactory,
    ContainerAllocation,
    Device,
    DeviceNode,
    DeviceTree,
    Health,
    Option,
    Publish,
)
from accel_plugins.testing import FakeHost, ServeBackend, command_factory

RESOURCE = "example.com/widget"


class Widgets:
    """A backend whose device list the test sets; every device gets /dev/<id>."""

    def __init__(self, *ids: str, numa: Mapping[str, int] = {}) -> None:
        self.health = {i: Health.HEALTHY for i in ids}
        self.numa = dict(numa)
        self.runs = 0
        self._publish: Publish | None = None
        self.crash: BaseException | None = None
        self._changed = asyncio.Event()

    def tree(self) -> DeviceTree:
        devices = {
            i: Device(
                i,
                health,
                numa_nodes=(self.numa[i],) if i in self.numa else (),
                nodes=(DeviceNode(f"/dev/{i}"),),
            )
            for i, health in self.health.items()
        }
        return {RESOURCE: devices}

    def set(self, **health: Health) -> None:
        self.health = dict(health)
        self._changed.set()

    async def run(self, publish: Publish) -> None:
        self.runs += 1
        while True:
            if self.crash is not None:
                crash, self.crash = self.crash, None
                raise crash
            publish(self.tree())
            self._changed.clear()
            await self._changed.wait()

    def fail(self, error: BaseException) -> None:
        self.crash = error
        self._changed.set()


# -- accel_host ------------------------------------------------------------------------


def test_nodes_are_real_character_and_block_devices(accel_host: FakeHost) -> None:
    assert accel_host.node("/dev/fpga0", major=240, minor=3) == (240, 3)
    accel_host.node("/dev/sdz", major=8, minor=0, block=True)

    info = os.stat(accel_host.dev / "fpga0")
    assert stat.S_ISCHR(info.st_mode)
    assert (os.major(info.st_rdev), os.minor(info.st_rdev)) == (240, 3)
    assert accel_host.local("/dev/sdz").is_block_device()
    assert accel_host.node("/dev/a") != accel_host.node("/dev/b"), "distinct default minors"


def test_a_class_device_reads_its_parents_numa_node(accel_host: FakeHost) -> None:
    pci = accel_host.pci_device("0000:3b:00.0", numa_node=1)
    dev = accel_host.node("/dev/fpga0", major=240, minor=0)
    directory = accel_host.class_device(
        "fpga", "fpga0", parent=pci, dev=dev, attributes={"errors": "0"}
    )

    sys = accel_host.sys
    assert directory == sys / "devices/pci0000:3b/0000:3b:00.0/fpga/fpga0"
    assert (sys / "class/fpga/fpga0/device/numa_node").read_text() == "1\n"
    assert (sys / "class/fpga/fpga0/dev").read_text() == "240:0\n"
    assert (sys / "dev/char/240:0").resolve() == directory.resolve()
    assert (sys / "bus/pci/devices/0000:3b:00.0").resolve() == (sys / "devices" / pci).resolve()
    # Links are relative, so the tree can be moved or bind-mounted.
    assert not os.readlink(sys / "class/fpga/fpga0").startswith("/")

    accel_host.write("/sys/class/fpga/fpga0/errors", "1")
    assert (directory / "errors").read_text() == "1\n"
    accel_host.set_attribute(pci, "numa_node", "-1")
    assert (sys / "class/fpga/fpga0/device/numa_node").read_text() == "-1\n"


def test_files_and_removal(accel_host: FakeHost) -> None:
    accel_host.regular_file("/dev/not-a-node")
    accel_host.write("/etc/fpga/firmware.bin", "blob")
    accel_host.sys_device("virtual/misc/thing", {"a": "1"})

    assert (accel_host.root / "etc/fpga/firmware.bin").read_text() == "blob\n"
    accel_host.remove("/dev/not-a-node")
    accel_host.remove("/sys/devices/virtual/misc")
    assert not (accel_host.dev / "not-a-node").exists()
    assert not (accel_host.sys / "devices/virtual/misc").exists()
    with pytest.raises(ValueError, match="absolute"):
        accel_host.local("dev/x")
    with pytest.raises(ValueError, match="absolute"):
        accel_host.local("/dev/../../etc")


# -- accel_kubelet ---------------------------------------------------------------------


async def test_the_kubelet_runs_on_a_short_directory(
    accel_kubelet: Kubelet, accel_plugin_dir: Path, accel_kubelet_events: list[str]
) -> None:
    assert accel_kubelet.running
    assert accel_kubelet.plugin_dir == accel_plugin_dir
    assert len(bytes(accel_kubelet.socket_path)) < 80
    assert accel_kubelet.socket_path.is_socket()
    assert any("listening" in line for line in accel_kubelet_events)


# -- accel_serve -----------------------------------------------------------------------


async def test_discover_allocate_and_watch_health(accel_serve: ServeBackend) -> None:
    backend = Widgets("w0", "w1", "w2", numa={"w0": 0, "w1": 1, "w2": 1})
    served = await accel_serve(backend)

    view = await served.wait_for_devices(RESOURCE, 3, healthy=3)
    assert view.devices["w1"].numa_nodes == (1,)
    # Two NUMA nodes: the framework offers GetPreferredAllocation and the emulator asks
    # it first, as the kubelet does; its default policy keeps a pair on one node.
    assert view.options.get_preferred_allocation_available

    record = await served.allocate(RESOURCE, 2)
    assert record.device_ids == ("w1", "w2")
    assert record.response.devices == (
        DeviceSpec("/dev/w1", "/dev/w1", "rw"),
        DeviceSpec("/dev/w2", "/dev/w2", "rw"),
    )
    chosen = await served.allocate(RESOURCE, ids=["w0"])
    assert chosen.device_ids == ("w0",)
    assert chosen.pod != record.pod, "each call is a new pod"

    backend.set(w0=Health.HEALTHY, w1=Health.UNHEALTHY, w2=Health.HEALTHY)
    view = await served.wait_for_health(RESOURCE, "w1", Health.UNHEALTHY)
    assert view.unhealthy == ["w1"]

    backend.set(w0=Health.HEALTHY)  # hot-unplug of two
    await served.wait_for_devices(RESOURCE, 1)
    assert served.devices(RESOURCE).healthy == ["w0"]
    assert served.backend_restarts == 0


async def test_allocation_errors_come_from_the_kubelets_path(accel_serve: ServeBackend) -> None:
    from accel_plugins.kubelet_emulator import InsufficientDevicesError, KubeletError

    served = await accel_serve(Widgets("w0"))
    await served.wait_for_devices(RESOURCE, 1)

    with pytest.raises(InsufficientDevicesError):
        await served.allocate(RESOURCE, 2)
    with pytest.raises(KubeletError, match="w7"):
        await served.allocate(RESOURCE, ids=["w7"])
    record = await served.allocate(RESOURCE, 1, pod="a")
    served.release("a")
    assert (await served.allocate(RESOURCE, 1)).device_ids == record.device_ids


class CustomAllocate(Widgets):
    def __init__(self) -> None:
        super().__init__("w0")

    def allocate(self, resource: str, devices: Sequence[Device]) -> ContainerAllocation:
        return ContainerAllocation(
            envs={"WIDGETS": ",".join(d.id for d in devices)},
            cdi_devices=tuple(f"example.com/widget={d.id}" for d in devices),
        )


async def test_the_response_is_what_the_backends_hook_returns(
    accel_serve: ServeBackend,
) -> None:
    served = await accel_serve(CustomAllocate, hook_timeout=2.0)  # a class is a factory
    await served.wait_for_devices(RESOURCE)

    response = (await served.allocate(RESOURCE, ids=["w0"])).response
    assert dict(response.envs) == {"WIDGETS": "w0"}
    assert response.cdi_devices == ("example.com/widget=w0",)


class Empty(Widgets):
    def __init__(self) -> None:
        super().__init__("w0")


async def test_a_resource_that_goes_away(accel_serve: ServeBackend) -> None:
    backend = Empty()
    served = await accel_serve(backend)
    await served.wait_for_devices(RESOURCE, 1)

    backend.tree = lambda: {}  # type: ignore[method-assign]
    backend.set()
    await served.wait_for_gone(RESOURCE)


async def test_a_backend_crash_fails_the_test_unless_expected(accel_serve: ServeBackend) -> None:
    backend = Widgets("w0")
    served = await accel_serve(backend, backend_restart_delay=0.01)
    await served.wait_for_devices(RESOURCE, 1)

    backend.fail(RuntimeError("card fell off the bus"))
    await served.kubelet.wait_for(lambda k: backend.runs == 2)
    await served.wait_for_health(RESOURCE, "w0", "Healthy")

    assert served.backend_restarts == 1
    assert any("card fell off the bus" in line for line in served.errors)
    with pytest.raises(AssertionError, match=r"crashed or returned 1 time\(s\)"):
        await served.stop()
    await served.stop()  # a second stop (the fixture's) is a no-op


async def test_expected_crashes_pass(accel_serve: ServeBackend) -> None:
    backend = Widgets("w0")
    served = await accel_serve(backend, expect_crashes=True, backend_restart_delay=0.01)
    await served.wait_for_devices(RESOURCE, 1)
    backend.fail(RuntimeError("boom"))
    await served.kubelet.wait_for(lambda k: backend.runs == 2)
    await served.stop()


async def test_a_manager_crash_ends_the_wait_with_its_error(accel_serve: ServeBackend) -> None:
    served = await accel_serve(Widgets("w 0"))  # a space: not a valid device ID

    with pytest.raises(InvalidSnapshotError, match="'w 0'"):
        await served.wait_for_devices(RESOURCE, 1, timeout=10)
    await served.stop()  # raised once already: teardown does not raise it again


# -- command_factory -------------------------------------------------------------------


def _build(context: BackendContext) -> BackendFactory:
    root = context.options["dev_root"]
    if not root.is_dir():
        raise ConfigError("--dev-root", "", f"{root} is not a directory")
    ids = [p.name for p in sorted(root.iterdir())]
    interval = context.options["poll_interval"]
    assert isinstance(interval, float)
    return lambda: Widgets(*ids)


COMMAND = BackendCommand(
    summary="widgets under --dev-root",
    build=_build,
    options=(
        Option("--dev-root", "where /dev is", default="/dev", type=Path),
        Option("--poll-interval", "seconds between scans", default=1.0, type=float),
    ),
)


async def test_a_command_is_built_as_the_command_line_would(
    accel_host: FakeHost, accel_serve: ServeBackend
) -> None:
    accel_host.regular_file("/dev/w0")
    served = await accel_serve(command_factory(COMMAND, {"dev_root": accel_host.dev}))
    await served.wait_for_devices(RESOURCE, 1)

    assert callable(command_factory(COMMAND))  # defaults: "/dev" converted to a Path
    with pytest.raises(ConfigError, match="not a directory"):
        command_factory(COMMAND, {"dev_root": accel_host.root / "missing"})
    with pytest.raises(TypeError, match="unknown option"):
        command_factory(COMMAND, {"devroot": "/dev"})


# -- the plugin as a third party loads it ----------------------------------------------

THIRD_PARTY_TEST = """
import pytest

from accel_plugins.plugin import Device, DeviceNode
from accel_plugins.testing import FakeHost, ServeBackend


class Cards:
    def __init__(self, dev):
        self.dev = dev

    async def run(self, publish):
        import asyncio

        ids = sorted(p.name for p in self.dev.glob("card*"))
        publish({"example.com/card": {i: Device(i, nodes=(DeviceNode(f"/dev/{i}"),)) for i in ids}})
        await asyncio.Event().wait()


def test_host(accel_host: FakeHost) -> None:
    accel_host.regular_file("/dev/card0")


@pytest.mark.asyncio
async def test_serve(accel_host: FakeHost, accel_serve: ServeBackend) -> None:
    accel_host.regular_file("/dev/card0")
    served = await accel_serve(lambda: Cards(accel_host.dev))
    await served.wait_for_devices("example.com/card", 1)
    record = await served.allocate("example.com/card", 1)
    assert record.response.devices[0].host_path == "/dev/card0"
"""


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_fresh_project_gets_the_fixtures_from_the_entry_point(tmp_path: Path) -> None:
    (tmp_path / "test_third_party.py").write_text(THIRD_PARTY_TEST)
    # pytest-asyncio's strict mode (its default): only the marker makes a test async.
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
    )

    result = _pytest(tmp_path, "-q")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    fixtures = _pytest(tmp_path, "--fixtures", "-q")
    for name in ("accel_host", "accel_kubelet", "accel_plugin_dir", "accel_serve"):
        assert name in fixtures.stdout


def test_the_plugin_can_be_switched_off(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_x(accel_host):\n    pass\n")
    result = _pytest(tmp_path, "-q", "-p", "no:accel_plugins")
    assert result.returncode != 0
    assert "fixture 'accel_host' not found" in result.stdout


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = textwrap.dedent(
        """
        import sys
        import accel_plugins.testing.plugin
        heavy = sorted(
            m for m in ("grpc", "google.protobuf", "prometheus_client", "yaml", "pynvml",
                        "pyudev", "accel_plugins.kubelet_emulator",
                        "accel_plugins.deviceplugin.manager")
            if m in sys.modules
        )
        print(",".join(heavy))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_the_public_names() -> None:
    import accel_plugins.testing as testing
    import accel_plugins.testing.plugin as plugin

    for name in testing.__all__:
        assert getattr(testing, name) is not None
    assert set(plugin.__all__) == {
        "accel_host",
        "accel_kubelet",
        "accel_kubelet_events",
        "accel_plugin_dir",
        "accel_serve",
    }
    with pytest.raises(AttributeError):
        _ = testing.nothing
