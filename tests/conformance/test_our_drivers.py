"""Our two DRA drivers hold to the kit's every check, on each API server version present.

Each driver runs as a process, started by the kit from its command line, so the
kit restarts it and simulates a reboot; the API server is the session's real
one of each version (tests/fixtures/dra_kube.py ``every_dra_version``). A check
is skipped only where the driver offers nothing to check (no taints, no shared
devices with these settings) or the API server drops the field (a feature gate
off in 1.33); any other skip fails the test, as does any failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.conformance.report import Status
from accel_plugins.testing import short_tempdir
from tests.conformance.kit import PYTHON, by_status, run_kit
from tests.e2e.test_kubelet_admit_cli import fake_node
from tests.fixtures.dra_kube import every_dra_version  # noqa: F401 (the fixture)

NOT_OFFERED = {
    "taints": "no published device is tainted",
    "shares": "no published device allows multiple allocations",
}
# 1.33: DRAAdminAccess and DRAPrioritizedList are alpha, off by default.
GATED_OFF = {
    "admin-access": "the API server dropped adminAccess",
    "subrequests": "the API server refuses subrequests",
}


def dra_argv(backend: list[str], plugins: Path) -> list[str]:
    return [
        PYTHON,
        "-m",
        "accel_plugins.cli.main",
        *backend,
        "--kubelet-api",
        "dra",
        "--node-name",
        "{node}",
        "--kubeconfig",
        "{kubeconfig}",
        "--kubelet-plugins-dir",
        str(plugins),
        "--plugins-registry-dir",
        "{registry}",
        "--dra-cdi-spec-dir",
        "{cdi_dir}",
    ]


@pytest.mark.parametrize("backend", ["generic", "nvidia"])
async def test_our_driver_passes_every_check(
    backend: str,
    kube_apiserver: ApiServer,
    kube_node: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if backend == "generic":
        driver, argv = "generic.accel-plugins.io", fake_node(tmp_path)
    else:
        driver = "gpu.nvidia.com"
        argv = ["nvidia", "--simulate", "pcie-4gpu", "--metrics-address", ""]
    with short_tempdir("kit-") as root:
        outcomes = await run_kit(
            kube_apiserver,
            root,
            driver=driver,
            node=kube_node,
            command=dra_argv(argv, root / "plugins"),
        )
    assert by_status(outcomes, Status.FAILED) == {}
    skipped = by_status(outcomes, Status.SKIPPED)
    allowed = {**NOT_OFFERED, **(GATED_OFF if "v1.33" in request.node.name else {})}
    assert {i for i, why in skipped.items() if not why.startswith(allowed.get(i, "\0"))} == set()
    assert len(by_status(outcomes, Status.PASSED)) >= len(outcomes) - len(allowed)
