"""docs/install.md's "Security defaults" say what the chart renders with no values at all.

Each documented phrase is paired with the rendered fact it promises, for every
DaemonSet the chart makes by default and with every backend on: if the README
or the chart drifts, one of the pairs fails. (tests/unit/chart/test_chart_security.py
checks the full securityContext for each CI values file.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.chart import Obj, ci_values, container, mounts, of_kind, render

README = Path(__file__).resolve().parents[2] / "docs" / "install.md"
WRITABLE = {"/var/lib/kubelet/device-plugins", "/var/run/cdi", "/var/lib/accel-plugins"}


def security_paragraph() -> str:
    text = README.read_text()
    start = text.index("Security defaults:")
    return re.sub(r"\s+", " ", text[start : text.index("\n\n", start)])


def context(ds: Obj) -> Obj:
    found: Obj = container(ds)["securityContext"]
    return found


def pod(ds: Obj) -> Obj:
    found: Obj = ds["spec"]["template"]["spec"]
    return found


def host_mounts_read_only(ds: Obj) -> bool:
    return all(
        read_only == (volume["hostPath"]["path"] not in WRITABLE)
        for _, read_only, volume in mounts(ds).values()
        if "hostPath" in volume
    )


PROMISES: list[tuple[str, Callable[[Obj], bool]]] = [
    (
        "`allowPrivilegeEscalation: false`",
        lambda ds: context(ds)["allowPrivilegeEscalation"] is False,
    ),
    ("every capability dropped", lambda ds: context(ds)["capabilities"] == {"drop": ["ALL"]}),
    ("read-only root filesystem", lambda ds: context(ds)["readOnlyRootFilesystem"] is True),
    (
        "seccomp `RuntimeDefault`",
        lambda ds: (
            context(ds)["seccompProfile"]
            == pod(ds)["securityContext"]["seccompProfile"]
            == {"type": "RuntimeDefault"}
        ),
    ),
    (
        "a service-account token only for the device-health Events",
        lambda ds: (
            pod(ds)["automountServiceAccountToken"] is True
            and pod(ds)["serviceAccountName"].endswith("-plugin")
        ),
    ),
    ("host paths read-only except the kubelet's device-plugin directory", host_mounts_read_only),
    ("run as uid 0", lambda ds: context(ds)["runAsUser"] == 0),
    (
        "`privileged: true` per backend is an explicit opt-in",
        lambda ds: not context(ds)["privileged"],
    ),
    ("does not use the host network", lambda ds: not pod(ds).get("hostNetwork", False)),
]

VALUES = [
    pytest.param({}, id="chart-defaults"),
    pytest.param(ci_values("metrics"), id="both-backends"),
]


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize(
    ("phrase", "holds"), [pytest.param(p, h, id=p.strip("`")[:40]) for p, h in PROMISES]
)
def test_documented_default_holds(values: Obj, phrase: str, holds: Callable[[Obj], bool]) -> None:
    assert phrase in security_paragraph(), "the README no longer says this"
    daemonsets = of_kind(render(values), "DaemonSet")
    assert daemonsets
    for name, ds in daemonsets.items():
        assert holds(ds), f"{name}: {phrase}"


@pytest.mark.parametrize("values", VALUES)
def test_without_health_events_no_token_is_mounted(values: Obj) -> None:
    """``healthEvents.enabled: false``: the device-plugin pods get no token at all."""
    daemonsets = of_kind(render({**values, "healthEvents": {"enabled": False}}), "DaemonSet")
    assert daemonsets
    for name, ds in daemonsets.items():
        assert pod(ds)["automountServiceAccountToken"] is False, name
