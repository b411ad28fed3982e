"""The old and new pod of a rolling update on one node: socket names, instance locks, the
sweep of what a killed instance left, the turn to publish slices and the shared checkpoint.

Socket names and the file lock around Prepare/Unprepare follow the kubeletplugin
library's ``RollingUpdate`` (k8s.io/dynamic-resource-allocation/kubeletplugin,
draplugin.go ``Start``: ``<driver>-<uid>-reg.sock``, ``dra-<uid>.sock``,
``serialize.lock`` in the plugin data directory). Other processes are real processes:
a flock is released by the kernel when its holder dies, which is what these rely on.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from accel_plugins.dra.checkpoint import Checkpoint, PreparedClaim
from accel_plugins.dra.driver import DraSettings
from accel_plugins.dra.instances import Instance, dra_socket_name, lock_name, uid_of_lock
from accel_plugins.dra.prepare import Preparer
from accel_plugins.dra.publish_turn import PublishTurn
from accel_plugins.dra.registration_socket import registration_socket_name
from accel_plugins.util.flock import FileLock, held_elsewhere
from tests.fixtures.dra_plugin import DRIVER, NODE, FakeClaims
from tests.support.polling import until
from tests.unit.dra.test_dra_prepare import preparer

UID_OLD = "0f1e2d3c-old"
UID_NEW = "9a8b7c6d-new"


@pytest.mark.parametrize(
    ("uid", "dra", "registration"),
    [
        pytest.param("", "dra.sock", f"{DRIVER}-reg.sock", id="no-uid-fixed-names"),
        pytest.param(UID_NEW, f"dra-{UID_NEW}.sock", f"{DRIVER}-{UID_NEW}-reg.sock", id="pod-uid"),
    ],
)
def test_socket_names_as_kubeletplugin_rolling_update(
    tmp_path: Path, uid: str, dra: str, registration: str
) -> None:
    settings = DraSettings(
        driver_name=DRIVER,
        node_name=NODE,
        kubelet_plugins_dir=tmp_path / "plugins",
        plugins_registry_dir=tmp_path / "registry",
        instance_uid=uid,
    )
    assert settings.socket_path == tmp_path / "plugins" / DRIVER / dra
    assert settings.registration_socket == tmp_path / "registry" / registration
    assert (dra_socket_name(uid), registration_socket_name(DRIVER, uid)) == (dra, registration)


@pytest.mark.parametrize(
    ("name", "uid"),
    [
        pytest.param("instance.lock", "", id="fixed"),
        pytest.param(f"instance-{UID_NEW}.lock", UID_NEW, id="pod"),
        pytest.param("instance-.lock", None, id="empty-uid"),
        pytest.param("serialize.lock", None, id="another-lock"),
        pytest.param("slices.lock", None, id="the-turn"),
    ],
)
def test_lock_names_round_trip(name: str, uid: str | None) -> None:
    assert uid_of_lock(name) == uid
    if uid is not None:
        assert lock_name(uid) == name


class Holder:
    """Another process holding a flock on ``path`` until stopped (or killed)."""

    def __init__(self, path: Path) -> None:
        code = (
            "import fcntl, os, sys\n"
            f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == b"held\n"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.kill()


def hold(holders: list[Holder], path: Path) -> Holder:
    holder = Holder(path)
    holders.append(holder)
    return holder


def test_a_killed_holder_frees_its_lock(tmp_path: Path, holders: list[Holder]) -> None:
    path = tmp_path / "x.lock"
    holder = hold(holders, path)
    lock = FileLock(path)
    assert held_elsewhere(path)
    assert not lock.try_acquire()
    holder.kill()
    assert not held_elsewhere(path)
    assert lock.try_acquire()
    assert held_elsewhere(path)  # another open file sees ours
    lock.close()


async def test_a_cancelled_wait_gives_the_lock_back_once_it_comes(
    tmp_path: Path, holders: list[Holder]
) -> None:
    path = tmp_path / "x.lock"
    holder = hold(holders, path)
    lock = FileLock(path)
    waiting = asyncio.ensure_future(lock.acquire())
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    holder.kill()
    # The waiting thread takes it when the holder dies and gives it straight back.
    other = FileLock(path)
    async with asyncio.timeout(5):
        await other.acquire()
    assert not lock.held
    other.close()
    lock.close()


def instance(root: Path, uid: str = "") -> Instance:
    (root / "plugins").mkdir(exist_ok=True)
    (root / "registry").mkdir(exist_ok=True)
    return Instance(root / "plugins", root / "registry", DRIVER, uid)


def test_without_a_pod_uid_one_instance_at_a_time(tmp_path: Path, holders: list[Holder]) -> None:
    first = instance(tmp_path)
    holder = hold(holders, first.lock_path)  # the running pod
    assert not first.try_start()
    holder.kill()
    assert first.try_start()
    first.stop()


def test_with_pod_uids_both_pods_run_and_see_each_other(tmp_path: Path) -> None:
    old, new = instance(tmp_path, UID_OLD), instance(tmp_path, UID_NEW)
    assert old.try_start()
    assert new.try_start()
    assert old.alive(UID_NEW)
    assert new.alive(UID_OLD)
    assert new.alive(UID_NEW)
    old.stop()
    assert not new.alive(UID_OLD)
    new.stop()


def listening(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    return server


def dead_socket(path: Path) -> None:
    listening(path).close()  # the file stays, nothing accepts


def test_the_sweep_removes_only_what_gone_instances_left(
    dra_root: Path, holders: list[Holder]
) -> None:
    me = instance(dra_root, UID_NEW)
    plugins, registry = me.plugin_dir, me.registry_dir
    gone, alive, talking = "1111-killed", "2222-running", "3333-lockless"
    for uid in (gone, alive, talking):
        (plugins / lock_name(uid)).touch()
    for uid in (gone, alive):
        dead_socket(plugins / dra_socket_name(uid))
    dead_socket(registry / registration_socket_name(DRIVER, gone))
    dead_socket(registry / registration_socket_name(DRIVER, alive))
    hold(holders, plugins / lock_name(alive))
    # An older version's pod without locks still answers on its socket: never removed.
    server = listening(plugins / dra_socket_name(talking))
    assert me.try_start()
    try:
        removed = set(me.sweep())
    finally:
        server.close()
        me.stop()
    assert removed == {
        plugins / dra_socket_name(gone),
        registry / registration_socket_name(DRIVER, gone),
        plugins / lock_name(gone),
        plugins / lock_name(talking),
    }
    assert (plugins / dra_socket_name(alive)).exists()
    assert (plugins / dra_socket_name(talking)).exists()


async def test_the_newest_instance_takes_the_turn_and_the_old_takes_it_back_if_it_dies(
    tmp_path: Path,
) -> None:
    old, new = instance(tmp_path, UID_OLD), instance(tmp_path, UID_NEW)
    assert old.try_start()
    assert new.try_start()
    old_turn, new_turn = PublishTurn(old, poll=0.01), PublishTurn(new, poll=0.01)
    async with asyncio.timeout(10):
        await old_turn.take()
        taking = asyncio.ensure_future(new_turn.take())
        await old_turn.lost()  # the new pod asked
        assert not taking.done()  # and waits for the old one to let go
        old_turn.give_up()
        await taking
        assert new_turn.held
        assert not old_turn.held
        orphaned = asyncio.ensure_future(old_turn.orphaned())
        await asyncio.sleep(0.05)
        assert not orphaned.done()  # the new pod runs: the old one stays quiet
        new_turn.close()
        new.stop()  # the new pod failed
        await orphaned
        await old_turn.take()
    assert old_turn.owner() == UID_OLD
    old_turn.close()
    old.stop()


def shared_preparer(root: Path, claims: FakeClaims) -> Preparer:
    return preparer(root, claims, shared=FileLock(root / "serialize.lock"))


async def test_a_claim_prepared_by_one_pod_is_unprepared_by_the_other(tmp_path: Path) -> None:
    claims = FakeClaims()
    ref = claims.add("uid-1", ("r", "card0"))
    old, new = shared_preparer(tmp_path, claims), shared_preparer(tmp_path, claims)
    prepared = (await old.prepare([ref]))["uid-1"]
    assert isinstance(prepared, PreparedClaim)
    spec = tmp_path / "cdi" / prepared.spec_file if prepared.spec_file else None
    assert spec is not None
    assert spec.exists()
    # The other pod answers a repeated Prepare from the checkpoint, without an API read.
    calls = len(claims.calls)
    assert (await new.prepare([ref]))["uid-1"] == prepared
    assert len(claims.calls) == calls
    assert await new.unprepare([ref]) == {"uid-1": ""}
    assert not spec.exists()
    assert Checkpoint(tmp_path / "checkpoint.json", DRIVER).load() == {}
    # The first pod sees the claim gone: preparing it again is a fresh Prepare.
    await old.prepare([ref])
    assert len(claims.calls) == calls + 1


def standing_by(pod: Instance) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return pod.standby is not None

    return check


async def test_without_a_pod_uid_a_second_pod_stands_by_until_the_first_exits(
    tmp_path: Path, holders: list[Holder]
) -> None:
    second = instance(tmp_path)
    first = hold(holders, second.lock_path)  # the pod that serves the fixed sockets
    admitted = asyncio.ensure_future(second.admitted(asyncio.Event(), "x serves dra.sock"))
    async with asyncio.timeout(10):
        await until(standing_by(second), "the second pod standing by")
        assert "standing by while another instance of x serves dra.sock" in str(second.standby)
        first.kill()
        assert await admitted
    assert second.standby is None
    second.stop()


async def test_a_pod_standing_by_stops_when_told(tmp_path: Path, holders: list[Holder]) -> None:
    second = instance(tmp_path)
    hold(holders, second.lock_path)
    stopping = asyncio.Event()
    admitted = asyncio.ensure_future(second.admitted(stopping, "x"))
    await asyncio.sleep(0.05)
    stopping.set()
    async with asyncio.timeout(10):
        assert not await admitted
    second.stop()
