"""The DRA taint effect of each reason, and what a claim needs to use such a device.

KEP-5055 (kubernetes/enhancements keps/sig-scheduling/5055-dra-device-taints-and-
tolerations/README.md): "`Effect: None` can be used to publish taints which are merely
informational. Such taints are ignored during scheduling and cause no eviction. Therefore
it is not necessary to specify tolerations for them." Informational here: ``unmonitored``
and the XIDs NVIDIA treats as application errors (as kubernetes-sigs/dra-driver-nvidia-gpu
cmd/gpu-kubelet-plugin/device_health.go ``healthEventToTaint`` taints them); every other
reason, and an Unhealthy device without one, gets ``NoSchedule``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accel_plugins.backends.nvidia.health import DEFAULT_IGNORED_XIDS
from accel_plugins.backends.nvidia.xid import NON_FATAL_XIDS, xid_reason
from accel_plugins.plugin.device import Device, Health
from accel_plugins.plugin.dra_taints import (
    EFFECT,
    INFORMATIONAL_EFFECT,
    DeviceToleration,
    TaintId,
    effect_of,
    taint_of,
    tolerated,
)
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from accel_plugins.runtime.cordon import cordon_reason
from accel_plugins.runtime.health_changes import BACKEND_DOWN

DRIVER = "drv.example.com"
DOCS = Path(__file__).resolve().parents[3] / "docs" / "dra-slices.md"

REASONS = [
    pytest.param(xid_reason(79), EFFECT, id="xid-79-fallen-off-the-bus"),
    pytest.param(xid_reason(48), EFFECT, id="xid-48-double-bit-ecc"),
    pytest.param(xid_reason(94), EFFECT, id="xid-94-contained-ecc"),
    pytest.param(xid_reason(9999), EFFECT, id="xid-unlisted"),
    pytest.param(HealthReason(ReasonKind.XID, "x", code=13), EFFECT, id="xid-13-built-fatal"),
    *[
        pytest.param(xid_reason(xid), INFORMATIONAL_EFFECT, id=f"xid-{xid}-application-error")
        for xid in sorted(NON_FATAL_XIDS)
    ],
    pytest.param(HealthReason(ReasonKind.GPU_LOST, "gone"), EFFECT, id="gpu-lost"),
    pytest.param(HealthReason(ReasonKind.ECC), EFFECT, id="ecc"),
    pytest.param(HealthReason(ReasonKind.NODE_VANISHED, "/dev/x"), EFFECT, id="node-vanished"),
    pytest.param(HealthReason(ReasonKind.UNREADABLE, "/dev/x"), EFFECT, id="unreadable"),
    pytest.param(cordon_reason("RMA pending"), EFFECT, id="cordoned"),
    pytest.param(HealthReason(ReasonKind.OTHER, "mps down"), EFFECT, id="other"),
    pytest.param(
        HealthReason(ReasonKind.OTHER, "fan slow", fatal=False),
        INFORMATIONAL_EFFECT,
        id="other-not-fatal",
    ),
    pytest.param(
        HealthReason(ReasonKind.UNMONITORED, "health events failed"),
        INFORMATIONAL_EFFECT,
        id="unmonitored-nvml",
    ),
    pytest.param(BACKEND_DOWN, INFORMATIONAL_EFFECT, id="unmonitored-backend-down"),
    pytest.param(None, EFFECT, id="no-reason"),
]


@pytest.mark.parametrize(("reason", "effect"), REASONS)
def test_each_reason_has_its_effect(reason: HealthReason | None, effect: str) -> None:
    device = Device(id="bad").with_health(Health.UNHEALTHY, reason)
    assert effect_of(reason) == effect
    taint = taint_of(DRIVER, None, "example.com/dev", device)
    assert (taint.key, taint.effect) == (f"{DRIVER}/unhealthy", effect)
    assert taint.required is (effect == EFFECT)


@pytest.mark.parametrize(("reason", "effect"), REASONS)
def test_where_none_is_refused_every_reason_gets_no_schedule(
    reason: HealthReason | None, effect: str
) -> None:
    """A 1.33/1.34 API server refuses effect None (422): the fallback is NoSchedule."""
    device = Device(id="bad").with_health(Health.UNHEALTHY, reason)
    taint = taint_of(DRIVER, None, "example.com/dev", device, informational=False)
    assert taint.effect == EFFECT
    assert taint.required


def test_the_non_fatal_xids_are_the_ones_the_health_monitor_ignores() -> None:
    assert NON_FATAL_XIDS == DEFAULT_IGNORED_XIDS


INFORMATIONAL = TaintId(f"{DRIVER}/unhealthy", "unmonitored", INFORMATIONAL_EFFECT)
FAULT = TaintId(f"{DRIVER}/unhealthy", "xid-79", EFFECT)


@pytest.mark.parametrize(
    ("taint", "tolerations", "allowed"),
    [
        pytest.param(INFORMATIONAL, (), True, id="none-needs-no-toleration"),
        pytest.param(
            INFORMATIONAL, (DeviceToleration("other/key", "Exists"),), True, id="none-any-other"
        ),
        pytest.param(
            INFORMATIONAL,
            (DeviceToleration(INFORMATIONAL.key, "Exists", "", "NoSchedule"),),
            True,
            id="none-a-noschedule-toleration",
        ),
        pytest.param(FAULT, (), False, id="noschedule-needs-one"),
        pytest.param(FAULT, (DeviceToleration("other/key", "Exists"),), False, id="ns-other"),
        pytest.param(FAULT, (DeviceToleration(FAULT.key, "Exists"),), True, id="noschedule-exists"),
        pytest.param(
            FAULT,
            (DeviceToleration(FAULT.key, "Exists", "", "None"),),
            False,
            id="noschedule-a-none-toleration",
        ),
    ],
)
def test_what_a_claim_needs_to_use_the_device(
    taint: TaintId, tolerations: tuple[DeviceToleration, ...], allowed: bool
) -> None:
    assert tolerated(taint, tolerations) is allowed
    for toleration in tolerations:  # one per case: Prepare's own check agrees
        assert toleration.tolerates(taint) is allowed


def _doc_rows() -> dict[str, str]:
    """The per-reason table in docs/dra-slices.md: first cell -> effect cell."""
    rows: dict[str, str] = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`(None|NoSchedule)`", cells[1]):
            rows[cells[0]] = cells[1].strip("`")
    return rows


def test_the_docs_table_says_the_same() -> None:
    rows = _doc_rows()
    for kind in ReasonKind:
        assert rows.pop(f"`{kind.value}`") == effect_of(HealthReason(kind)), kind
    xids = ", ".join(str(x) for x in sorted(NON_FATAL_XIDS))
    assert rows.pop(f"`xid` {xids}") == effect_of(xid_reason(min(NON_FATAL_XIDS)))
    assert rows.pop("(none)") == effect_of(None)
    assert rows == {}
