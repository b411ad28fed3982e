"""The kit catches what it claims to: each deliberately broken driver fails exactly its check.

The driver is tests/conformance/toy_driver.py, a small DRA driver that shares no
code with our DRA framework. Without a fault it passes every check that applies
to it (all but taints and shares, which it offers only with ``--shared``); each
``--fault`` breaks one rule, and the kit must fail that rule's check and no other
(checks that need the failed one are skipped, which is not a failure). Each case
uses a driver name of its own, so ``--sole-node`` holds on the shared API server:
any slice of that driver for another node is its fault.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.conformance.report import Outcome, Status
from accel_plugins.testing import short_tempdir
from tests.conformance.kit import PYTHON, by_status, run_kit
from tests.fixtures.dra_kube import V1_34, V1_36, ServerOf

_names: Iterator[int] = itertools.count()


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


CASES = [
    # The six faults the issue names, then one for every other check a real API server
    # lets a driver break (slices-valid and taints cannot be: the API server refuses such
    # slices, so their rules are proven on broken inputs in tests/unit/conformance).
    ("none", None),
    ("forget-cdi-after-reboot", "reboot"),
    ("prepare-not-idempotent", "prepare-idempotent"),
    ("no-republish", "kubelet-restart"),
    ("whole-call-fails", "one-bad-claim"),
    ("undefined-cdi-ids", "prepare"),
    ("foreign-slices", "slices-node"),
    ("relative-endpoint", "registration"),
    ("unserved-version", "versions"),
    ("incomplete-pool", "slices-pools"),
    ("answers-other-drivers", "other-drivers"),
    ("ghost-claims-prepared", "prepare-error"),
    ("unknown-unprepare-fails", "unprepare-unknown"),
    ("unprepare-not-idempotent", "unprepare-idempotent"),
    ("racy-answers", "concurrent"),
    ("forget-claims-on-restart", "restart"),
    ("exclusive-devices", "admin-access"),
    ("subrequest-full-name", "subrequests"),
    ("no-health-timeout", "health"),
]


SHARED_CASES = [("none", None), ("no-share-id", "shares")]
# The kit mostly waits (for processes, registrations, the API server): several runs at
# once, each with its own driver name, node, registry and CDI directory.
AT_ONCE = 5
Runs = dict[tuple[str, bool], dict[str, Outcome]]
pytestmark = pytest.mark.timeout(600)  # the module fixture runs every case


@pytest.fixture(scope="module")
def runs(apiservers: ServerOf) -> Runs:
    """Every case's outcomes: the faults on 1.34; with ``--shared`` on 1.36, which keeps
    allowMultipleAllocations (DRAConsumableCapacity is beta there, on by default)."""
    plain, shares = apiservers(V1_34), apiservers(V1_36)

    async def all_runs() -> Runs:
        gate = asyncio.Semaphore(AT_ONCE)

        async def one(fault: str, shared: bool) -> tuple[tuple[str, bool], dict[str, Outcome]]:
            async with gate:
                return (fault, shared), await run_toy(shares if shared else plain, fault, shared)

        cases = [(f, False) for f, _ in CASES] + [(f, True) for f, _ in SHARED_CASES]
        return dict(await asyncio.gather(*(one(f, shared) for f, shared in cases)))

    return asyncio.run(all_runs())


async def run_toy(server: ApiServer, fault: str, shared: bool) -> dict[str, Outcome]:
    n = next(_names)
    with short_tempdir("kit-") as root:
        return await run_kit(
            server,
            root,
            driver=f"toy-{n}.conformance.example",
            node=f"toy-node-{n}",
            command=[*toy(fault), *(["--shared"] if shared else [])],
            sole_node=True,
            repair=5.0,  # the toy repairs within a second; a broken one is not waited for long
        )


@pytest.mark.parametrize(("fault", "check"), [pytest.param(f, c, id=f) for f, c in CASES])
def test_a_broken_driver_fails_exactly_its_check(fault: str, check: str | None, runs: Runs) -> None:
    fails_exactly(runs[(fault, False)], check, not_offered={"taints", "shares"})


@pytest.mark.parametrize(
    ("fault", "check"), [pytest.param(f, c, id=f"shared-{f}") for f, c in SHARED_CASES]
)
def test_shares_are_checked_where_the_api_server_keeps_them(
    fault: str, check: str | None, runs: Runs
) -> None:
    """The toy's shared devices are allocated twice, each with a shareID, and each answer
    needs its share_id."""
    fails_exactly(runs[(fault, True)], check, not_offered={"taints"})


def fails_exactly(
    outcomes: dict[str, Outcome], check: str | None, *, not_offered: set[str]
) -> None:
    failed = by_status(outcomes, Status.FAILED)
    assert set(failed) == ({check} if check else set()), failed
    skipped = by_status(outcomes, Status.SKIPPED)
    unexplained = {
        i: why
        for i, why in skipped.items()
        if i not in not_offered and not why.startswith("needs ")
    }
    assert unexplained == {}
