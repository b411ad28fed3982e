"""One cordon: the state file, the annotation's syntax, and how a cordon lies over a tree.

The annotation and the state file are ours (no upstream format to follow); the
taint a cordoned device gets in DRA is the one every Unhealthy device gets
(tests/e2e/test_dra_kube_taints.py cites the KEP-5055 validation rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.errors import AllocationError, ConfigError
from accel_plugins.plugin.allocation import resolve
from accel_plugins.plugin.device import Device, Health, tree
from accel_plugins.plugin.dra_taints import DeviceToleration, TaintId
from accel_plugins.plugin.health_reason import HealthReason, ReasonKind
from accel_plugins.runtime.cordon import (
    ANNOTATION,
    CORDON_FILE,
    Cordons,
    apply_cordons,
    cordon,
    parse_annotation,
    read_file,
    uncordon,
)

XID = HealthReason(ReasonKind.XID, "fell off the bus", code=79)
GPUS = "example.com/gpu"


@pytest.mark.parametrize(
    ("text", "cordons"),
    [
        pytest.param("gpu-0=fan failing", {"gpu-0": "fan failing"}, id="one"),
        pytest.param("gpu-0=a, gpu-1=b,", {"gpu-0": "a", "gpu-1": "b"}, id="two-trailing-comma"),
        pytest.param("gpu-2", {"gpu-2": ""}, id="no-reason"),
        pytest.param("", {}, id="empty"),
    ],
)
def test_annotation_syntax(text: str, cordons: dict[str, str]) -> None:
    assert parse_annotation(text) == cordons


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("=no device", id="no-device"),
        pytest.param("gpu 0=spaced", id="space-in-device"),
        pytest.param("gpu-0=" + "x" * 300, id="reason-too-long"),
    ],
)
def test_malformed_annotation_is_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_annotation(text)


def test_cordon_and_uncordon_edit_the_state_file(tmp_path: Path) -> None:
    cordon(tmp_path, "gpu-0", "fan failing")
    cordon(tmp_path, "GPU-1", "")
    cordon(tmp_path, "gpu-0", "fan replaced soon")  # re-worded
    assert read_file(tmp_path / CORDON_FILE) == {"gpu-0": "fan replaced soon", "GPU-1": ""}
    assert uncordon(tmp_path, "GPU-1")
    assert not uncordon(tmp_path, "GPU-1")  # nothing to undo
    assert read_file(tmp_path / CORDON_FILE) == {"gpu-0": "fan replaced soon"}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".cordons.")] == [
        ".cordons.lock"
    ]  # no temporary file left


def test_a_bad_state_file_keeps_the_cordons_read_before(tmp_path: Path) -> None:
    cordon(tmp_path, "gpu-0", "fan")
    cordons = Cordons(tmp_path)
    (tmp_path / CORDON_FILE).write_text("{not json")
    cordons.reload_file()
    assert cordons.current == {"gpu-0": "fan"}
    with pytest.raises(ConfigError, match="not a cordon file"):
        read_file(tmp_path / CORDON_FILE)


def sample() -> dict[str, dict[str, Device]]:
    return tree(
        {
            GPUS: [
                Device("GPU-aaa"),
                Device("GPU-bbb"),
                Device("GPU-ccc").with_health(Health.UNHEALTHY, XID),
            ]
        }
    )


def dra_name(_resource: str, device: Device) -> str:
    return {"GPU-aaa": "gpu-0", "GPU-bbb": "gpu-1", "GPU-ccc": "gpu-2"}[device.id]


@pytest.mark.parametrize(
    ("cordons", "reasons"),
    [
        pytest.param(
            {"GPU-aaa": "fan"},
            {"GPU-aaa": "cordoned: fan", "GPU-bbb": None, "GPU-ccc": "xid 79: fell off the bus"},
            id="by-device-id",
        ),
        pytest.param(
            {"gpu-1": "swap"},
            {"GPU-aaa": None, "GPU-bbb": "cordoned: swap", "GPU-ccc": "xid 79: fell off the bus"},
            id="by-dra-name",
        ),
        pytest.param(
            {"gpu-2": "rma"},
            {"GPU-aaa": None, "GPU-bbb": None, "GPU-ccc": "cordoned: rma"},
            id="an-operator-cordon-shows-over-a-fault",
        ),
        pytest.param(
            {},
            {"GPU-aaa": None, "GPU-bbb": None, "GPU-ccc": "xid 79: fell off the bus"},
            id="uncordoned-keeps-the-backends-own-reason",
        ),
        pytest.param(
            {"GPU-zzz": "gone"},
            {"GPU-aaa": None, "GPU-bbb": None, "GPU-ccc": "xid 79: fell off the bus"},
            id="unknown-device-changes-nothing",
        ),
    ],
)
def test_cordons_over_a_tree(cordons: dict[str, str], reasons: dict[str, str | None]) -> None:
    served = apply_cordons(sample(), cordons, dra_name)[GPUS]
    assert {i: (str(d.reason) if d.reason else None) for i, d in served.items()} == reasons
    assert {i for i, d in served.items() if d.healthy} == {i for i, r in reasons.items() if not r}


def test_allocate_of_a_cordoned_device_names_the_cordon() -> None:
    served = apply_cordons(sample(), {"GPU-aaa": "fan failing"})[GPUS]
    with pytest.raises(AllocationError) as refused:
        resolve(GPUS, ["GPU-aaa"], served, require_healthy=True)
    assert str(refused.value) == f"resource {GPUS}: cordoned device IDs 'GPU-aaa' (fan failing)"


async def test_the_watched_file_and_the_annotation_merge(tmp_path: Path) -> None:
    cordons = Cordons(tmp_path)
    changed = asyncio.Event()
    cordons.subscribe(changed.set)
    watcher = cordons.watch()
    try:
        cordon(tmp_path, "gpu-0", "from the file")  # what `accel-plugins cordon` does
        async with asyncio.timeout(10):
            await changed.wait()
        assert cordons.current == {"gpu-0": "from the file"}
        changed.clear()
        cordons.set_annotation("gpu-0=from the node,gpu-1=also")
        assert changed.is_set()
        assert cordons.current == {"gpu-0": "from the file", "gpu-1": "also"}  # the file wins
        changed.clear()
        cordons.set_annotation("gpu-0=bad,=x")  # malformed: kept as it was
        assert not changed.is_set()
        assert cordons.current == {"gpu-0": "from the file", "gpu-1": "also"}
        uncordon(tmp_path, "gpu-0")
        async with asyncio.timeout(10):
            await changed.wait()
        assert cordons.current == {"gpu-0": "from the node", "gpu-1": "also"}
    finally:
        watcher.close()


# kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/
# devicetoleration.go, ToleratesTaint: the rows below are its three rules and the default.
TAINT = TaintId("gpu.nvidia.com/unhealthy", "cordoned-rma")


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        pytest.param(DeviceToleration(TAINT.key, "Exists"), True, id="exists-any-value"),
        pytest.param(DeviceToleration(TAINT.key, "Equal", "cordoned-rma"), True, id="equal"),
        pytest.param(DeviceToleration(TAINT.key, "Equal", "xid-79"), False, id="equal-other"),
        pytest.param(DeviceToleration(TAINT.key, "", "cordoned-rma"), True, id="empty-is-equal"),
        pytest.param(DeviceToleration("", "Exists"), True, id="empty-key-exists-matches-all"),
        pytest.param(DeviceToleration("", "Equal"), False, id="empty-key-equal-needs-value"),
        pytest.param(DeviceToleration("other/key", "Exists"), False, id="other-key"),
        pytest.param(DeviceToleration(TAINT.key, "Exists", "", "NoExecute"), False, id="effect"),
        pytest.param(DeviceToleration(TAINT.key, "Exists", "", "NoSchedule"), True, id="same"),
        pytest.param(DeviceToleration(TAINT.key, "Lt"), False, id="unknown-operator"),
    ],
)
def test_toleration_matching(toleration: DeviceToleration, tolerated: bool) -> None:
    assert toleration.tolerates(TAINT) is tolerated


class _FlakyNodeWatch:
    """A client whose Node watch fails ``failures`` times, then sends one version."""

    def __init__(self, failures: int, annotation: str) -> None:
        self.failures = failures
        self.annotation = annotation
        self.served = asyncio.Event()

    async def watch(self, resource: object, **selector: object) -> AsyncIterator[tuple[str, Any]]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("All connection attempts failed")
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Node

        yield "ADDED", Node(metadata=ObjectMeta(annotations={ANNOTATION: self.annotation}))
        self.served.set()
        await asyncio.Event().wait()  # the watch stays open


async def test_an_api_server_out_of_reach_is_one_warning_per_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("lightkube")
    from accel_plugins.kube import cordon as kube_cordon

    monkeypatch.setattr(kube_cordon, "BACKOFF_START", 0.001)
    client = _FlakyNodeWatch(failures=4, annotation="gpu-0=fan failing")
    cordons = Cordons(tmp_path)
    caplog.set_level(logging.DEBUG, logger="accel_plugins.kube.cordon")
    task = asyncio.create_task(kube_cordon.follow_annotation(client, "node-a", cordons))  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(client.served.wait(), timeout=10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    failed = [r for r in caplog.records if "failed (will retry)" in r.getMessage()]
    assert [r.levelno for r in failed] == [logging.WARNING] + [logging.DEBUG] * 3
    assert any("again" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)
    assert cordons.current == {"gpu-0": "fan failing"}
