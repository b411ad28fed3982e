"""KubeletRestarts: one count per kubelet socket file, whichever signal sees it first.

Issue 27: tests/e2e/test_metrics.py::test_kubelet_restart_counts_and_healthz_follows
counted 2 restarts for one under load. The kubelet's start wipes the plugin
directory (a check is posted for our removed socket) and then creates
kubelet.sock; when the check ran after the creation but before its inotify
event was handled, the check counted the new inode and the event counted the
same file again.
"""

from __future__ import annotations

import pytest

from accel_plugins.runtime.kubelet_restarts import KubeletRestarts

# Each step: ("checked" | "created", the socket's inode then, or None for no socket).
Step = tuple[str, int | None]


@pytest.mark.parametrize(
    ("steps", "restarts"),
    [
        pytest.param([("checked", 7)], 0, id="the-first-socket-is-no-restart"),
        pytest.param([("checked", 7), ("checked", 7)], 0, id="the-same-socket-checked-again"),
        pytest.param([("checked", 7), ("created", 9)], 1, id="created-a-new-inode"),
        pytest.param(
            [("checked", 7), ("created", 7)], 1, id="created-again-reusing-the-inode-number"
        ),
        pytest.param([("checked", 7), ("checked", 9)], 1, id="a-check-finds-another-inode"),
        pytest.param(
            [("checked", 7), ("checked", 9), ("created", 9)],
            1,
            id="a-check-between-creation-and-its-event-counts-it-once",
        ),
        pytest.param(
            [("checked", 7), ("checked", None), ("created", 9)],
            1,
            id="seen-gone-then-created",
        ),
        pytest.param(
            [("checked", 7), ("checked", 9), ("created", 9), ("created", 9)],
            2,
            id="after-the-check-and-its-event-a-new-creation-counts",
        ),
        pytest.param(
            [("checked", 7), ("checked", 9), ("checked", None), ("created", 9)],
            2,
            id="a-socket-gone-since-its-check-does-not-swallow-the-next-creation",
        ),
        pytest.param([("created", 7)], 0, id="created-before-any-check"),
        pytest.param([("checked", 7), ("created", None)], 0, id="created-and-gone-at-once"),
    ],
)
def test_each_kubelet_socket_counts_once(steps: list[Step], restarts: int) -> None:
    counted: list[None] = []
    tracker = KubeletRestarts(lambda: counted.append(None))
    for signal, identity in steps:
        getattr(tracker, signal)(identity)
    assert len(counted) == restarts
