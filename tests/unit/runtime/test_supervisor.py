"""The one supervisor of the backend both modes share (runtime/supervisor.py).

What it must do comes from the fault rule both modes promise (docs/design.md): a backend
that crashes, returns or cannot be built is rebuilt with a doubling delay and the mode is
told it died; a reload builds first and keeps the running backend when that fails; late
trees of a replaced backend are dropped; an invalid tree is fatal. The device-plugin
``Manager`` and the ``DraDriver`` each run on it (tests/e2e/test_fault_rule.py and the DRA
tests check them whole); here it runs alone, with a mode that records what it is told.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from accel_plugins.errors import InvalidSnapshotError
from accel_plugins.plugin.backend import Backend, Publish
from accel_plugins.plugin.device import Device, DeviceTree, tree
from accel_plugins.runtime.supervisor import RuntimeSettings, Supervisor

RESOURCE = "example.com/card"
FAST = RuntimeSettings(backend_restart_delay=0.01, backend_restart_max=0.02)
SLOW = RuntimeSettings(backend_restart_delay=60, backend_restart_max=60)


def cards(*ids: str) -> DeviceTree:
    return tree({RESOURCE: [Device(i) for i in ids]})


@dataclass
class Recorder:
    """A mode that writes down what the supervisor tells it, and lets a test await it."""

    events: list[tuple[str, object]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def _note(self, kind: str, value: object = None) -> None:
        self.events.append((kind, value))
        self.changed.set()

    def backend_started(self, backend: Backend) -> None:
        self._note("started", backend)

    def tree_published(self, tree: DeviceTree) -> None:
        self._note("tree", sorted(tree[RESOURCE]))

    def backend_died(self) -> None:
        self._note("died")

    def snapshot_invalid(self, error: InvalidSnapshotError) -> None:
        self._note("invalid", str(error))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    async def until(self, check: Callable[[Recorder], bool]) -> None:
        async with asyncio.timeout(5):
            while not check(self):
                self.changed.clear()
                await self.changed.wait()


class Publishes:
    """Publishes ``tree`` once, then runs until cancelled (or returns, or raises)."""

    def __init__(self, tree: DeviceTree, end: Callable[[], None] | None = None) -> None:
        self.tree = tree
        self.end = end
        self.publish: Publish | None = None

    async def run(self, publish: Publish) -> None:
        self.publish = publish
        publish(self.tree)
        if self.end is not None:
            self.end()
            return
        await asyncio.Event().wait()


def crash() -> None:
    raise RuntimeError("card fell off the bus")


@pytest.fixture
async def running() -> AsyncIterator[Callable[..., tuple[Supervisor, Recorder]]]:
    tasks: list[asyncio.Task[None]] = []

    def start(
        factory: Callable[[], Backend], settings: RuntimeSettings = FAST
    ) -> tuple[Supervisor, Recorder]:
        recorder = Recorder()
        supervisor = Supervisor(factory, settings, recorder)
        tasks.append(asyncio.create_task(supervisor.run()))
        return supervisor, recorder

    yield start
    for task in tasks:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize(
    "end",
    [pytest.param(crash, id="crashes"), pytest.param(lambda: None, id="returns")],
)
async def test_a_backend_that_ends_is_reported_dead_and_rebuilt(
    running: Callable[..., tuple[Supervisor, Recorder]], end: Callable[[], None]
) -> None:
    _, recorder = running(lambda: Publishes(cards("c0"), end))
    await recorder.until(lambda r: r.kinds().count("started") >= 3)
    assert recorder.kinds()[:6] == ["started", "tree", "died"] * 2


async def test_a_factory_that_raises_is_reported_dead_and_tried_again(
    running: Callable[..., tuple[Supervisor, Recorder]],
) -> None:
    attempts: list[int] = []

    def factory() -> Backend:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("no driver yet")
        return Publishes(cards("c0"))

    supervisor, recorder = running(factory)
    await recorder.until(lambda r: "tree" in r.kinds())
    assert recorder.kinds() == ["died", "died", "started", "tree"]
    assert supervisor.backend is not None


async def test_a_reload_replaces_the_backend_without_a_death(
    running: Callable[..., tuple[Supervisor, Recorder]],
) -> None:
    built = iter([Publishes(cards("c0")), Publishes(cards("c0", "c1"))])
    supervisor, recorder = running(lambda: next(built))
    await recorder.until(lambda r: "tree" in r.kinds())
    assert supervisor.reload() is None
    await recorder.until(lambda r: r.kinds().count("tree") == 2)
    assert recorder.kinds() == ["started", "tree", "started", "tree"]
    assert recorder.events[-1] == ("tree", ["c0", "c1"])


async def test_a_reload_that_cannot_build_keeps_the_running_backend(
    running: Callable[..., tuple[Supervisor, Recorder]],
) -> None:
    first = Publishes(cards("c0"))
    builds = 0

    def factory() -> Backend:
        nonlocal builds
        builds += 1
        if builds > 1:
            raise RuntimeError("card fell off the bus")
        return first

    supervisor, recorder = running(factory)
    await recorder.until(lambda r: "tree" in r.kinds())
    assert supervisor.reload() == "card fell off the bus"
    assert supervisor.backend is first
    assert recorder.kinds() == ["started", "tree"]


async def test_a_reload_ends_the_wait_before_a_rebuild(
    running: Callable[..., tuple[Supervisor, Recorder]],
) -> None:
    """With a minute's delay after a crash, a reload starts the new backend at once."""
    built = iter([Publishes(cards("c0"), crash), Publishes(cards("c1"))])
    supervisor, recorder = running(lambda: next(built), SLOW)
    await recorder.until(lambda r: "died" in r.kinds())
    assert supervisor.reload() is None
    await recorder.until(lambda r: r.kinds().count("tree") == 2)
    assert recorder.events[-1] == ("tree", ["c1"])


async def test_late_trees_of_a_replaced_backend_are_dropped(
    running: Callable[..., tuple[Supervisor, Recorder]],
) -> None:
    old = Publishes(cards("c0"))
    built = iter([old, Publishes(cards("c1"))])
    supervisor, recorder = running(lambda: next(built))
    await recorder.until(lambda r: "tree" in r.kinds())
    supervisor.reload()
    await recorder.until(lambda r: r.kinds().count("tree") == 2)
    assert old.publish is not None
    old.publish(cards("c0", "c9"))
    assert recorder.events[-1] == ("tree", ["c1"])


async def test_an_invalid_tree_is_reported_once_and_nothing_after_it(
    running: Callable[..., tuple[Supervisor, Recorder]],
) -> None:
    backend = Publishes(cards("bad id"))
    _, recorder = running(lambda: backend)
    await recorder.until(lambda r: "invalid" in r.kinds())
    assert backend.publish is not None
    backend.publish(cards("c0"))
    assert recorder.kinds() == ["started", "invalid"]
    assert "device ID contains ' '" in str(recorder.events[-1][1])
