"""GenericBackend.run: the trees it publishes as nodes come, go and change (inotify-driven)."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.backends.generic import monitor
from accel_plugins.backends.generic.backend import GenericBackend
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.discovery import UnitFacts, device_id
from accel_plugins.plugin.device import Device, DeviceNode, DeviceTree
from accel_plugins.util.watch import InotifyError
from tests.fixtures.generic import FakeHost, RunBackend

SERIAL = "accel-plugins.io/serial"
AUDIO = "accel-plugins.io/audio"

CONFIG = """
devices:
  - name: serial
    groups: [{paths: [{path: /dev/ttyUSB*}]}]
  - name: audio
    groups: [{count: 2, paths: [{path: /dev/snd/pcm*}]}]
"""


def backend(host: FakeHost, text: str = CONFIG, **settings: Any) -> GenericBackend:
    return GenericBackend(parse_config(textwrap.dedent(text)), host.settings(**settings))


def health(tree: DeviceTree, resource: str) -> dict[str, str]:
    return {i: d.health.value for i, d in tree[resource].items()}


ID0 = device_id(0, ["/dev/ttyUSB0"])
ID1 = device_id(0, ["/dev/ttyUSB1"])


async def test_publishes_every_resource_at_once(
    fake_host: FakeHost, run_backend: RunBackend
) -> None:
    fake_host.node("/dev/ttyUSB0")
    published = await run_backend(backend(fake_host))
    assert health(published.latest, SERIAL) == {ID0: "Healthy"}
    assert published.latest[AUDIO] == {}


async def test_hotplug_in_and_out_and_back(fake_host: FakeHost, run_backend: RunBackend) -> None:
    fake_host.node("/dev/ttyUSB0")
    published = await run_backend(backend(fake_host))

    fake_host.node("/dev/ttyUSB1")
    tree = await published.wait_for(lambda t: ID1 in t[SERIAL])
    assert health(tree, SERIAL) == {ID0: "Healthy", ID1: "Healthy"}

    fake_host.remove("/dev/ttyUSB1")
    tree = await published.wait_for(lambda t: not t[SERIAL][ID1].healthy)
    assert health(tree, SERIAL) == {ID0: "Healthy", ID1: "Unhealthy"}

    fake_host.node("/dev/ttyUSB1")
    await published.wait_for(lambda t: t[SERIAL][ID1].healthy)


async def test_a_node_that_stops_being_a_device_turns_unhealthy(
    fake_host: FakeHost, run_backend: RunBackend
) -> None:
    fake_host.node("/dev/ttyUSB0")
    published = await run_backend(backend(fake_host))
    fake_host.remove("/dev/ttyUSB0")
    fake_host.regular_file("/dev/ttyUSB0")
    await published.wait_for(lambda t: health(t, SERIAL) == {ID0: "Unhealthy"})
    fake_host.remove("/dev/ttyUSB0")
    fake_host.node("/dev/ttyUSB0")
    await published.wait_for(lambda t: health(t, SERIAL) == {ID0: "Healthy"})


async def test_a_directory_that_appears_later_is_watched(
    fake_host: FakeHost, run_backend: RunBackend
) -> None:
    published = await run_backend(backend(fake_host))
    fake_host.node("/dev/snd/pcmC0D0p")  # creates /dev/snd, then the node in it
    tree = await published.wait_for(lambda t: len(t[AUDIO]) == 2)
    assert {d.nodes[0].host_path for d in tree[AUDIO].values()} == {"/dev/snd/pcmC0D0p"}
    fake_host.node("/dev/snd/pcmC0D1p")
    await published.wait_for(lambda t: len(t[AUDIO]) == 4)


class Waits:
    """Records the timeout of every ChangeFeed.wait: None means no timer, events only."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.timeouts: list[float | None] = []
        self.changed = asyncio.Event()
        original = monitor.ChangeFeed.wait

        async def wait(feed: monitor.ChangeFeed, timeout: float | None) -> monitor.Wakeup:
            self.timeouts.append(timeout)
            self.changed.set()
            return await original(feed, timeout)

        monkeypatch.setattr(monitor.ChangeFeed, "wait", wait)

    async def next(self) -> float | None:
        self.changed.clear()
        await asyncio.wait_for(self.changed.wait(), 5)
        return self.timeouts[-1]

    async def first_watch_rescanned(self) -> None:
        """Until the scan that follows the first inotify watches has run (backend.run scans
        again whenever it watches a new directory, for what changed in between): a test that
        changes /dev before it would race with that scan."""
        while len(self.timeouts) < 2:
            await self.next()


async def test_vanished_devices_are_dropped_after_the_grace_period(
    fake_host: FakeHost, run_backend: RunBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = Waits(monkeypatch)
    now = [0.0]
    serial = GenericBackend(
        parse_config(textwrap.dedent(CONFIG)),
        fake_host.settings(vanished_grace=30),
        clock=lambda: now[0],
    )
    fake_host.node("/dev/ttyUSB0")
    published = await run_backend(serial)
    await waits.first_watch_rescanned()
    fake_host.remove("/dev/ttyUSB0")
    await published.wait_for(lambda t: health(t, SERIAL) == {ID0: "Unhealthy"})
    now[0] = 30.0
    serial.rescan()
    await published.wait_for(lambda t: t[SERIAL] == {})


async def test_without_inotify_the_rescan_timer_is_the_net(
    fake_host: FakeHost, run_backend: RunBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_inotify(*args: object) -> None:
        raise InotifyError("inotify_init1 failed: too many instances")

    monkeypatch.setattr(monitor, "DirWatcher", no_inotify)
    dev = fake_host.node("/dev/ttyUSB0")
    usb = fake_host.sys_device("pci0000:00/0000:00:14.0", {"numa_node": "-1"})
    fake_host.sys_device("pci0000:00/0000:00:14.0/ttyUSB0", dev=dev)
    published = await run_backend(backend(fake_host, rescan_interval=0.05))
    assert published.latest[SERIAL][ID0].numa_nodes == ()
    (usb / "numa_node").write_text("1\n")  # no event anywhere: only the timer finds it
    await published.wait_for(lambda t: t[SERIAL][ID0].numa_nodes == (1,))
    fake_host.node("/dev/ttyUSB1")
    await published.wait_for(lambda t: ID1 in t[SERIAL])


@pytest.mark.parametrize(
    ("config", "timer"),
    [
        pytest.param(CONFIG, None, id="path globs: inotify covers, no timer"),
        pytest.param(
            "devices: [{name: serial, groups: [{udev: [{subsystem: tty}]}]}]",
            0.05,
            id="udev matchers: sysfs and maybe-absent uevents, timer kept",
        ),
    ],
)
async def test_which_configs_keep_the_rescan_timer(
    fake_host: FakeHost, config: str, timer: float | None
) -> None:
    generic = backend(fake_host, config, rescan_interval=0.05)
    feed = monitor.ChangeFeed()
    try:
        feed.watch({fake_host.dev})
        assert feed.watching_all
        assert generic._rescan_timer(feed) == timer
    finally:
        feed.close()


def unit(name: str, group: int = 0, replica: int = 0, numa: int | None = None) -> Device:
    return Device(
        f"{name}-{replica}",
        numa_nodes=() if numa is None else (numa,),
        nodes=(DeviceNode(f"/dev/{name}"),),
        facts=UnitFacts(group=group, replica=replica),
    )


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        pytest.param([unit("a"), unit("b")], False, id="units alike in one group"),
        pytest.param([unit("null", replica=n) for n in range(4)], False, id="replicas of one unit"),
        pytest.param(
            [unit("a"), unit("a", replica=1), unit("b")], True, id="replicas of two units"
        ),
        pytest.param([unit("a"), unit("b", group=1)], True, id="two config groups"),
        pytest.param([unit("a", numa=0), unit("b", numa=1)], True, id="two NUMA nodes"),
    ],
)
def test_which_resources_have_something_to_prefer(
    fake_host: FakeHost, devices: list[Device], expected: bool
) -> None:
    assert backend(fake_host).has_preference(SERIAL, devices) is expected


async def test_an_idle_plugin_has_no_timer_while_events_cover_everything(
    fake_host: FakeHost, run_backend: RunBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits = Waits(monkeypatch)
    fake_host.node("/dev/ttyUSB0")
    published = await run_backend(backend(fake_host, rescan_interval=0.05, vanished_grace=60))
    await waits.first_watch_rescanned()
    assert waits.timeouts[-1] is None, "no periodic wake-up: inotify covers every directory"
    fake_host.remove("/dev/ttyUSB0")
    await published.wait_for(lambda t: t[SERIAL][ID0].health.value == "Unhealthy")
    # A vanished device is carried through its grace period: only a scan can end it.
    assert waits.timeouts[-1] == 0.05
    fake_host.node("/dev/ttyUSB0")
    await published.wait_for(lambda t: t[SERIAL][ID0].health.value == "Healthy")
    while waits.timeouts[-1] is not None:
        await waits.next()


async def test_cdi_names_and_spec_files(
    fake_host: FakeHost, run_backend: RunBackend, tmp_path: Path
) -> None:
    cdi_dir = tmp_path / "cdi"
    fake_host.node("/dev/ttyUSB0")
    published = await run_backend(backend(fake_host, cdi_spec_dir=cdi_dir))
    assert published.latest[SERIAL][ID0].cdi_devices == (f"{SERIAL}={ID0}",)
    spec = json.loads((cdi_dir / "accel-plugins.io-serial.json").read_text())
    assert spec["kind"] == SERIAL
    assert [d["name"] for d in spec["devices"]] == [ID0]
    assert not (cdi_dir / "accel-plugins.io-audio.json").exists()  # no devices, no spec

    fake_host.node("/dev/ttyUSB1")
    await published.wait_for(lambda t: ID1 in t[SERIAL])
    spec = json.loads((cdi_dir / "accel-plugins.io-serial.json").read_text())
    assert sorted(d["name"] for d in spec["devices"]) == sorted([ID0, ID1])


async def test_the_domain_prefixes_resource_names(
    fake_host: FakeHost, run_backend: RunBackend
) -> None:
    published = await run_backend(backend(fake_host, domain="squat.ai"))
    assert sorted(published.latest) == ["squat.ai/audio", "squat.ai/serial"]


async def test_an_entry_that_matches_nothing_is_one_warning_naming_file_and_entry(
    fake_host: FakeHost, run_backend: RunBackend, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27: a glob matching nothing served 0 devices without a word."""
    fake_host.node("/dev/ttyUSB0")
    config = parse_config(textwrap.dedent(CONFIG), "/etc/accel/generic.yaml")
    with caplog.at_level("WARNING", logger="accel_plugins.backends.generic"):
        published = await run_backend(GenericBackend(config, fake_host.settings()))
        fake_host.node("/dev/ttyUSB1")  # later scans do not repeat it
        await published.wait_for(lambda t: ID1 in t[SERIAL])
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "/etc/accel/generic.yaml: devices[1] (audio): matches nothing on this node; "
        "its resource has no devices until a match appears"
    ]
