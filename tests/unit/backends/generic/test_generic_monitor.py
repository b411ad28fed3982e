"""The change feed: which uevent source, inotify wakeups, the anchor timeout."""

from __future__ import annotations

from pathlib import Path

from accel_plugins.backends.generic.eventsource import UdevSource
from accel_plugins.backends.generic.monitor import ChangeFeed, Wakeup

# Which source a feed opens: tests/unit/backends/generic/test_generic_eventsource.py.


async def test_a_new_entry_in_a_watched_directory_wakes_the_waiter(tmp_path: Path) -> None:
    feed = ChangeFeed()
    try:
        assert feed.watch({tmp_path}) is True
        assert feed.watch({tmp_path}) is False  # already watched: no rescan needed
        (tmp_path / "ttyUSB0").touch()
        assert await feed.wait(timeout=10) is Wakeup.INOTIFY
    finally:
        feed.close()


async def test_without_events_the_anchor_timeout_wakes_the_waiter() -> None:
    feed = ChangeFeed()
    try:
        assert await feed.wait(timeout=0.01) is Wakeup.TIMER
    finally:
        feed.close()


async def test_a_removed_directory_is_watched_again_when_it_returns(tmp_path: Path) -> None:
    snd = tmp_path / "snd"
    snd.mkdir()
    feed = ChangeFeed()
    try:
        feed.watch({tmp_path, snd})
        snd.rmdir()
        assert await feed.wait(timeout=10) is Wakeup.INOTIFY
        feed.clear()
        snd.mkdir()
        assert feed.watch({tmp_path, snd}) is True
    finally:
        feed.close()


async def test_the_kernel_source_starts_without_udevd() -> None:
    feed = ChangeFeed()
    try:
        feed.start_udev(UdevSource.KERNEL, {"tty"})
        assert feed.source is UdevSource.KERNEL
    finally:
        feed.close()
