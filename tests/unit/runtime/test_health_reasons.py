"""Reasons: the XID table, the reason each backend gives, and the changes every channel sees.

The XID meanings are NVIDIA's published descriptions (docs.nvidia.com/deploy/xid-errors,
"Analyzing Xid Errors with the Xid Catalog"); the XIDs NVIDIA's device plugin ignores
as application errors, with their comments, are in NVIDIA/k8s-device-plugin
internal/rm/health.go (13, 31, 43, 45, 68, 109).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from accel_plugins.backends.nvidia.xid import UNLISTED, xid_reason
from accel_plugins.plugin.device import Device, Health, tree
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from accel_plugins.runtime.health_changes import (
    BACKEND_DOWN,
    HealthChange,
    HealthWatch,
    all_unhealthy,
    health_changes,
)

R = "example.com/card"


@pytest.mark.parametrize(
    ("xid", "meaning"),
    [
        # NVIDIA's device plugin's application errors (internal/rm/health.go).
        pytest.param(13, "Graphics Engine Exception", id="13-app-graphics-engine"),
        pytest.param(31, "GPU memory page fault", id="31-app-page-fault"),
        pytest.param(43, "GPU stopped processing", id="43-app-stopped"),
        pytest.param(45, "Preemptive cleanup, due to previous errors", id="45-app-cleanup"),
        pytest.param(68, "Video processor exception", id="68-app-video"),
        pytest.param(109, "Context Switch Timeout Error", id="109-app-context-switch"),
        # Common hardware XIDs from NVIDIA's catalogue.
        pytest.param(48, "Double Bit ECC Error", id="48-dbe"),
        pytest.param(63, "ECC page retirement or row remapping recording event", id="63"),
        pytest.param(64, "ECC page retirement or row remapper recording failure", id="64"),
        pytest.param(74, "NVLink Error", id="74-nvlink"),
        pytest.param(79, "GPU has fallen off the bus", id="79-off-the-bus"),
        pytest.param(92, "High single-bit ECC error rate", id="92-sbe-rate"),
        pytest.param(94, "Contained ECC error", id="94-contained"),
        pytest.param(95, "Uncontained ECC error", id="95-uncontained"),
        pytest.param(119, "GSP RPC Timeout", id="119-gsp-timeout"),
        pytest.param(9999, UNLISTED, id="unlisted-keeps-its-number"),
    ],
)
def test_xid_reason_carries_the_number_and_nvidias_meaning(xid: int, meaning: str) -> None:
    reason = xid_reason(xid)
    assert (reason.kind, reason.code, reason.detail) == (ReasonKind.XID, xid, meaning)
    assert str(reason) == f"xid {xid}: {meaning}"


def card(n: int, health: Health = Health.HEALTHY, reason: HealthReason | None = None) -> Device:
    return Device(f"card{n}", health=health, reason=reason)


XID79 = xid_reason(79)
GONE = HealthReason(ReasonKind.NODE_VANISHED, "/dev/card1 is gone")


@pytest.mark.parametrize(
    ("old", "new", "changes"),
    [
        pytest.param(None, [card(0)], [], id="healthy-at-start-is-no-news"),
        pytest.param(
            None,
            [card(0, Health.UNHEALTHY, GONE)],
            [HealthChange(R, "card0", False, GONE)],
            id="unhealthy-at-start",
        ),
        pytest.param(
            [card(0), card(1)],
            [card(0), card(1, Health.UNHEALTHY, XID79)],
            [HealthChange(R, "card1", False, XID79)],
            id="turns-unhealthy",
        ),
        pytest.param(
            [card(1, Health.UNHEALTHY, XID79)],
            [card(1, Health.UNHEALTHY, GONE)],
            [HealthChange(R, "card1", False, GONE)],
            id="new-reason",
        ),
        pytest.param(
            [card(1, Health.UNHEALTHY, XID79)],
            [card(1)],
            [HealthChange(R, "card1", True, None)],
            id="recovers",
        ),
        pytest.param([card(1, Health.UNHEALTHY, XID79)], [], [], id="gone-is-not-a-change"),
        pytest.param(
            [card(1, Health.UNHEALTHY, XID79)],
            [card(1, Health.UNHEALTHY, XID79)],
            [],
            id="same-reason-again",
        ),
    ],
)
def test_health_changes(
    old: list[Device] | None, new: list[Device], changes: list[HealthChange]
) -> None:
    assert health_changes(None if old is None else tree({R: old}), tree({R: new})) == changes


def test_backend_down_marks_every_device_and_keeps_known_reasons() -> None:
    devices = tree({R: [card(0), card(1, Health.UNHEALTHY, XID79)]})[R]
    down = all_unhealthy(devices)
    assert {i: (d.health, d.reason) for i, d in down.items()} == {
        "card0": (Health.UNHEALTHY, BACKEND_DOWN),
        "card1": (Health.UNHEALTHY, XID79),
    }
    assert BACKEND_DOWN.kind is ReasonKind.UNMONITORED


class Recording:
    def __init__(self) -> None:
        self.batches: list[list[HealthChange]] = []

    def health_changed(self, changes: Sequence[HealthChange]) -> None:
        self.batches.append(list(changes))


class Broken:
    def health_changed(self, changes: Sequence[HealthChange]) -> None:
        raise RuntimeError("sink bug")


def test_watch_tells_every_sink_once_per_change_and_survives_a_broken_one() -> None:
    sink = Recording()
    watch = HealthWatch([Broken(), sink])
    healthy = tree({R: [card(0)]})
    broken = tree({R: [card(0, Health.UNHEALTHY, XID79)]})
    for t in (healthy, broken, broken, tree({R: [card(0, Health.UNHEALTHY, XID79)]}), healthy):
        watch.observe(t)
    assert sink.batches == [
        [HealthChange(R, "card0", False, XID79)],
        [HealthChange(R, "card0", True, None)],
    ]
