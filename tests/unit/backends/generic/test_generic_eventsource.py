"""Which uevents the generic backend listens to, and the reason it logs.

The netlink table rows follow /proc/net/netlink as the kernel prints it
(net/netlink/af_netlink.c, netlink_seq_show: sk Eth Pid Groups Rmem Wmem
Dump Locks Drops Inode); the kernel's own uevent socket has port 0, udevd's
listens to group 1 (systemd-udevd opens its monitor with MONITOR_GROUP_KERNEL),
and systemd (PID 1) follows udevd's events on group 2. The same choice over
real namespaces and sockets: tests/e2e/test_generic_netns.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from accel_plugins.backends.generic.backend import GenericBackend, GenericSettings
from accel_plugins.backends.generic.config import parse_config
from accel_plugins.backends.generic.eventsource import (
    EventPaths,
    SourceChoice,
    UdevSource,
    choose_source,
    udevd_listens_here,
)
from accel_plugins.backends.generic.monitor import announce

HEADER = "sk               Eth Pid        Groups   Rmem     Wmem     Dump  Locks    Drops    Inode"
KERNEL_SOCKET = (
    "000000006b0803a5 15  0          00000000 0        0        0     2        0        8"
)
UDEVD = "00000000a1b2c3d4 15  412        00000001 0        0        0     2        0        23456"
SYSTEMD = "00000000a1b2c3d5 15  1          00000002 0        0        0     2        0        23457"
ROUTE = "00000000a1b2c3d6 0   733        00000551 0        0        0     2        0        23458"

HOST = [HEADER, KERNEL_SOCKET, UDEVD, SYSTEMD, ROUTE]
POD = [HEADER, KERNEL_SOCKET, ROUTE]
INITIAL = "         0          0 4294967295\n"
MAPPED = "         0     100000      65536\n"


def paths_for(
    tmp_path: Path, *, udevd: bool, table: list[str] | None, uid_map: str = INITIAL
) -> EventPaths:
    control = tmp_path / "control"
    if udevd:
        control.touch()
    netlink = tmp_path / "netlink"
    if table is not None:
        netlink.write_text("\n".join(table) + "\n")
    (tmp_path / "uid_map").write_text(uid_map)
    (tmp_path / "fd").mkdir()
    return EventPaths(
        udev_control=control,
        netlink_table=netlink,
        uid_map=tmp_path / "uid_map",
        own_fds=tmp_path / "fd",
    )


CHOICES = [
    # (asked, udevd running, netlink table, uid map, chosen, reason says, doubtful)
    pytest.param("auto", True, HOST, INITIAL, "udev", "host network", False, id="host-network"),
    pytest.param(
        "auto", True, POD, INITIAL, "kernel", "another network namespace", False, id="pod-network"
    ),
    pytest.param("auto", False, POD, INITIAL, "kernel", "no udevd", False, id="no-udevd"),
    pytest.param("auto", False, HOST, INITIAL, "kernel", "no udevd", False, id="stale-listener"),
    pytest.param("auto", True, None, INITIAL, "kernel", "unreadable", False, id="no-table"),
    pytest.param(
        "auto", True, POD, MAPPED, "kernel", "user namespace", True, id="pod-with-user-namespace"
    ),
    pytest.param("udev", True, HOST, INITIAL, "udev", "as asked", False, id="udev-on-host"),
    pytest.param(
        "udev", True, POD, INITIAL, "udev", "will not arrive", True, id="udev-in-pod-warns"
    ),
    pytest.param("kernel", True, HOST, INITIAL, "kernel", "as asked", False, id="kernel-as-asked"),
    pytest.param("off", True, HOST, INITIAL, "off", "inotify and rescans", False, id="off"),
]


@pytest.mark.parametrize(
    ("asked", "udevd", "table", "uid_map", "chosen", "reason", "doubtful"), CHOICES
)
def test_choice(
    tmp_path: Path,
    asked: str,
    udevd: bool,
    table: list[str] | None,
    uid_map: str,
    chosen: str,
    reason: str,
    doubtful: bool,
) -> None:
    paths = paths_for(tmp_path, udevd=udevd, table=table, uid_map=uid_map)
    choice = choose_source(UdevSource(asked), paths)
    assert choice.source is UdevSource(chosen)
    assert reason in choice.reason
    assert choice.doubtful is doubtful


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        pytest.param([KERNEL_SOCKET], False, id="only-the-kernel's-socket"),
        pytest.param([SYSTEMD], False, id="udev-group-listener-is-not-udevd"),
        pytest.param([UDEVD], True, id="udevd"),
        pytest.param(["garbage", "15 x y"], False, id="malformed-rows"),
    ],
)
def test_reading_the_netlink_table(tmp_path: Path, rows: list[str], expected: bool) -> None:
    paths = paths_for(tmp_path, udevd=True, table=[HEADER, *rows])
    assert udevd_listens_here(paths) is expected


def test_our_own_kernel_listener_is_not_taken_for_udevd(tmp_path: Path) -> None:
    """A monitor this process still holds (a backend replaced on reload) is ours."""
    paths = paths_for(tmp_path, udevd=True, table=[HEADER, UDEVD])
    (paths.own_fds / "7").symlink_to("socket:[23456]")
    assert udevd_listens_here(paths) is False


def test_the_choice_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    choice = SourceChoice(UdevSource.KERNEL, "a reason only this test gives")
    with caplog.at_level(logging.INFO):
        announce(choice)
        announce(choice)
    lines = [r.getMessage() for r in caplog.records if "only this test" in r.getMessage()]
    assert lines == ["uevent source: kernel (a reason only this test gives)"]


MIC = "devices:\n  - name: mic\n    groups:\n      - udev: [{%s}]\n"
PROPERTY_MATCHER = MIC % "properties: {ID_MODEL: Yeti*}"
SYSFS_MATCHER = MIC % "subsystem: sound"


@pytest.mark.parametrize(
    ("config", "source", "database", "watched"),
    [
        pytest.param(PROPERTY_MATCHER, "kernel", True, True, id="kernel-source-needs-ID-props"),
        pytest.param(PROPERTY_MATCHER, "udev", True, False, id="udevd-events-come-after-its-write"),
        pytest.param(SYSFS_MATCHER, "kernel", True, False, id="sysfs-matchers-need-no-database"),
        pytest.param(PROPERTY_MATCHER, "kernel", False, False, id="database-not-mounted"),
    ],
)
def test_udevd_database_watched_for_id_properties_after_a_kernel_uevent(
    tmp_path: Path, config: str, source: str, database: bool, watched: bool
) -> None:
    """A kernel uevent comes before udevd has run its rules: the ID_* properties a
    matcher wants appear when udevd writes /run/udev/data/<device>, so that directory
    wakes a scan too (systemd-udevd writes the database before it sends its event)."""
    data = tmp_path / "data"
    if database:
        data.mkdir()
    settings = GenericSettings(event_paths=EventPaths(udev_data=data))
    backend = GenericBackend(parse_config(config, "test.yaml"), settings)
    feed = SimpleNamespace(source=UdevSource(source))
    expected = {data} if watched else set()
    assert backend._udev_database(feed) == expected  # type: ignore[arg-type]
