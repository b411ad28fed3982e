"""The switch's wait: what each mode's side reads on a node, and the wait on it.

The device-plugin side is read from the emulator's real PodResources socket and the
plugin directory's real sockets; the DRA side from a checkpoint written by the driver's
own serializer (accel_plugins.dra.checkpoint) and its dra.sock.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel_plugins.dra.checkpoint import PreparedClaim, PreparedDevice, dumps
from accel_plugins.dra.model import ClaimRef
from accel_plugins.kubelet_emulator import DeviceState, Kubelet
from accel_plugins.switch.metrics import HandoverCollector
from accel_plugins.switch.model import Blockers, HeldDevice, Mode, SwitchSettings
from accel_plugins.switch.probes import DevicePluginSide, DraSide
from accel_plugins.switch.wait import HandoverState, await_handover
from accel_plugins.testing import short_tempdir
from accel_plugins.util.unix_socket import accepts_connections as live
from tests.fixtures.kubelet import MakePlugin, register

LABEL = "accel-plugins.io/kubelet-api"
WIDGET = "example.com/widget"


@pytest.mark.parametrize(
    ("labels", "default", "mine", "away"),
    [
        pytest.param({LABEL: "dra"}, "device-plugin", "device-plugin", True, id="relabelled-dra"),
        pytest.param({LABEL: "dra"}, "device-plugin", "dra", False, id="still-dra"),
        pytest.param({}, "device-plugin", "device-plugin", False, id="unlabelled-default"),
        pytest.param({}, "device-plugin", "dra", True, id="label-removed-from-dra"),
        pytest.param({LABEL: "typo"}, "dra", "dra", True, id="unknown-value-runs-neither"),
        pytest.param(None, "dra", "dra", False, id="no-labels-at-all"),
    ],
)
def test_a_stop_is_a_switch_when_the_label_no_longer_names_our_mode(
    labels: dict[str, str] | None, default: Mode, mine: Mode, away: bool
) -> None:
    assert SwitchSettings(LABEL, default).switching_away(labels, mine) is away


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    with short_tempdir("hand-") as root:
        yield root


def test_a_socket_file_left_by_a_killed_plugin_is_not_live(socket_dir: Path) -> None:
    path = socket_dir / "example.com_widget.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    assert live(path)
    server.close()  # the file stays, as after SIGKILL
    assert path.exists()
    assert not live(path)


async def test_the_device_plugin_side_reads_pods_and_live_sockets(
    kubelet: Kubelet, make_plugin: MakePlugin, kubelet_dir: Path
) -> None:
    assert kubelet.pod_resources_socket is not None
    plugin = await make_plugin([DeviceState("w0"), DeviceState("w1")], name="example.com_widget")
    await register(kubelet, plugin, WIDGET)
    other = await make_plugin([DeviceState("x0")], name="other.io_thing")
    await register(kubelet, other, "other.io/thing")
    await kubelet.allocate("trainer", "main", WIDGET, 1, namespace="ml")
    await kubelet.allocate("web", "main", "other.io/thing", 1, namespace="ml")
    side = DevicePluginSide(kubelet_dir, kubelet.pod_resources_socket, ["example.com"])

    found = await side.read()
    assert [(h.holder, h.resource) for h in found.held] == [("ml/trainer", WIDGET)]
    assert found.advertised == ("example.com_widget.sock",)

    kubelet.release("trainer", namespace="ml")
    await plugin.stop()
    assert (await side.read()).clear  # the other domain's pod and socket do not count


def _claim(uid: str, device: str) -> PreparedClaim:
    return PreparedClaim(
        ClaimRef(namespace="ml", name=f"claim-{uid}", uid=uid),
        (PreparedDevice(("gpu",), "node-a", device, ()),),
        None,
    )


@pytest.mark.parametrize(
    ("checkpoint", "held"),
    [
        pytest.param(None, [], id="no-checkpoint"),
        pytest.param(
            dumps("gpu.nvidia.com", {"u1": _claim("u1", "gpu-0"), "u2": _claim("u2", "gpu-3")}),
            [("ml/claim-u1", "gpu-0"), ("ml/claim-u2", "gpu-3")],
            id="prepared-claims",
        ),
        pytest.param(dumps("gpu.nvidia.com", {}), [], id="all-unprepared"),
        pytest.param("{not json", [("checkpoint.json", "unreadable")], id="unreadable-counts"),
    ],
)
async def test_the_dra_side_reads_the_drivers_checkpoint(
    socket_dir: Path, checkpoint: str | None, held: list[tuple[str, str]]
) -> None:
    driver_dir = socket_dir / "gpu.nvidia.com"
    driver_dir.mkdir()
    if checkpoint is not None:
        (driver_dir / "checkpoint.json").write_text(checkpoint)
    found = await DraSide(socket_dir, "gpu.nvidia.com").read()
    assert [(Path(h.holder).name, h.device.partition(":")[0]) for h in found.held] == [
        (Path(holder).name, device) for holder, device in held
    ]
    assert found.advertised == ()


async def test_the_dra_side_sees_a_live_driver_socket(socket_dir: Path) -> None:
    driver_dir = socket_dir / "gpu.nvidia.com"
    driver_dir.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(driver_dir / "dra.sock"))
    server.listen()
    try:
        found = await DraSide(socket_dir, "gpu.nvidia.com").read()
        assert len(found.advertised) == 1
    finally:
        server.close()


class Steps:
    """A side whose reads are given in advance; the third read holds until ``gate`` is set
    (``reached`` says it began), so the test sees the wait in progress."""

    def __init__(self, *reads: Blockers | Exception) -> None:
        self.reads = list(reads)
        self.count = 0
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()

    async def read(self) -> Blockers:
        self.count += 1
        if self.count == 3:
            self.reached.set()
            await self.gate.wait()
        step = self.reads.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


HELD = HeldDevice("ml/trainer", WIDGET, "w0")


async def test_the_wait_ends_when_the_other_mode_is_clear_and_is_exported() -> None:
    side = Steps(
        OSError("no kubelet yet"),
        Blockers(held=(HELD,), advertised=("example.com_widget.sock",)),
        Blockers(advertised=("example.com_widget.sock",)),
        Blockers(),
    )
    state = HandoverState("dra")
    collector = HandoverCollector(state)

    task = asyncio.ensure_future(await_handover(side, state, interval=0))
    await side.reached.wait()  # a failed read (not clear), then one holding a device
    samples = {m.name: m.samples[0].value for m in collector.collect()}
    assert samples["accel_plugins_kubelet_api_switch_waiting"] == 1.0
    assert samples["accel_plugins_kubelet_api_switch_held_devices"] == 1.0
    assert samples["accel_plugins_kubelet_api_switch_advertised"] == 1.0
    side.gate.set()
    assert (await task).clear
    assert side.count == 4
    samples = {m.name: m.samples[0].value for m in collector.collect()}
    assert samples == {
        "accel_plugins_kubelet_api_switch_waiting": 0.0,
        "accel_plugins_kubelet_api_switch_held_devices": 0.0,
        "accel_plugins_kubelet_api_switch_advertised": 0.0,
        "accel_plugins_kubelet_api_switch_wait_seconds": state.waited,
    }
