"""The kit catches what it claims to: each deliberately broken driver fails exactly its check.

The driver is tests/conformance/toy_driver.py, a small DRA driver that shares no
code with our DRA framework. Without a fault it passes every check that applies
to it; each ``--fault`` breaks one rule, and the kit must fail that rule's check
and no other (checks that need the failed one are skipped, which is not a
failure). Each case uses a driver name of its own, so ``--sole-node`` holds on
the shared API server: any slice of that driver for another node is its fault.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.conformance.report import Status
from accel_plugins.testing import short_tempdir
from tests.conformance.kit import PYTHON, by_status, run_kit

_names: Iterator[int] = itertools.count()
NOT_OFFERED = {"taints", "shares"}  # the toy publishes no taints and no shared device


def toy(fault: str) -> list[str]:
    return [
        PYTHON,
        "-m",
        "tests.conformance.toy_driver",
        "--driver",
        "{driver}",
        "--node",
        "{node}",
        "--registry",
        "{registry}",
        "--plugin-dir",
        "{workdir}/plugin",
        "--cdi-dir",
        "{cdi_dir}",
        "--kubeconfig",
        "{kubeconfig}",
        "--boot-id-file",
        "{boot_id_file}",
        "--fault",
        fault,
    ]


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        pytest.param("none", None, id="correct"),
        pytest.param("forget-cdi-after-reboot", "reboot", id="forgets-cdi-specs-after-reboot"),
        pytest.param("prepare-not-idempotent", "prepare-idempotent", id="prepare-not-idempotent"),
        pytest.param("no-republish", "kubelet-restart", id="never-republishes-after-the-wipe"),
        pytest.param("whole-call-fails", "one-bad-claim", id="fails-the-call-for-one-bad-claim"),
        pytest.param("undefined-cdi-ids", "prepare", id="cdi-ids-no-spec-defines"),
        pytest.param("foreign-slices", "slices-node", id="publishes-another-nodes-slices"),
    ],
)
async def test_a_broken_driver_fails_exactly_its_check(
    fault: str, check: str | None, kube_apiserver: ApiServer, kube_node: str
) -> None:
    with short_tempdir("kit-") as root:
        outcomes = await run_kit(
            kube_apiserver,
            root,
            driver=f"toy-{next(_names)}.conformance.example",
            node=kube_node,
            command=toy(fault),
            sole_node=True,
            repair=5.0,  # the toy repairs within a second; a broken one is not waited for long
        )
    failed = by_status(outcomes, Status.FAILED)
    assert set(failed) == ({check} if check else set()), failed
    skipped = by_status(outcomes, Status.SKIPPED)
    unexplained = {
        i: why
        for i, why in skipped.items()
        if i not in NOT_OFFERED and not why.startswith("needs ")
    }
    assert unexplained == {}
