"""Our two DRA drivers hold to the kit's every check, on each API server version present.

Each driver runs as a process, started by the kit from its command line, so the
kit restarts it and simulates a reboot; the API server is the session's real
one of each version (tests/fixtures/dra_kube.py ``DRA_VERSIONS``), three runs at a
time (each mostly waits). A check
is skipped only where the driver offers nothing to check (no taints, no shared
devices with these settings: the NVIDIA driver's GPU 0 is time-sliced, published once
for several claims only where the API server keeps the field, 1.36) or the API server
drops the field (a feature gate off in 1.33); any other skip fails the test, as does
any failure.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from lightkube import KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.conformance.report import Outcome, Status
from accel_plugins.kube.client import make_client
from accel_plugins.testing import short_tempdir
from tests.conformance.kit import PYTHON, by_status, run_kit
from tests.e2e.test_kubelet_admit_cli import fake_node
from tests.fixtures.dra_kube import DRA_VERSIONS, ServerOf

pytestmark = pytest.mark.timeout(300)  # the module fixture runs every case

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


BACKENDS = ("generic", "nvidia")
AT_ONCE = 3  # kit runs at a time: each is mostly waiting for its driver and the API server
Results = dict[tuple[str, str], dict[str, Outcome] | str]  # (backend, version) -> outcomes


# GPU 0 time-sliced in two: on 1.36 (consumable capacity beta, on) it is published once
# for two claims, so the kit's "shares" check runs: each claim answered with its share_id.
SHARED_GPU = """\
version: v1
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, devices: [0], replicas: 2, rename: nvidia.com/gpu.shared}
"""


def driver_argv(backend: str, home: Path) -> tuple[str, list[str]]:
    if backend == "generic":
        return "generic.accel-plugins.io", fake_node(home)
    config = home / "nvidia.yaml"
    config.write_text(SHARED_GPU)
    return "gpu.nvidia.com", [
        "nvidia", "--simulate", "pcie-4gpu", "--metrics-address", "", "--config", str(config),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def runs(apiservers: ServerOf, tmp_path_factory: pytest.TempPathFactory) -> Results:
    """Every (backend, API server version) run of the kit, a few at a time; a version whose
    binary is missing holds the reason to skip instead."""
    servers: dict[str, ApiServer | str] = {}
    for kind in DRA_VERSIONS:
        try:
            servers[kind.name] = apiservers(kind)
        except pytest.skip.Exception as exc:
            servers[kind.name] = str(exc)

    async def one(backend: str, version: str, server: ApiServer) -> dict[str, Outcome]:
        home = tmp_path_factory.mktemp(f"{backend}-{version}")
        node = f"ours-{backend}-{version.replace('.', '-')}"
        admin = make_client(KubeConfig.from_dict(server.kubeconfig()))
        try:
            await admin.create(Node(metadata=ObjectMeta(name=node)))  # the slices' owner
        finally:
            await admin.close()
        driver, argv = driver_argv(backend, home)
        async with gate:
            with short_tempdir("kit-") as root:
                return await run_kit(
                    server,
                    root,
                    driver=driver,
                    node=node,
                    command=dra_argv(argv, root / "plugins"),
                )

    async def all_runs() -> Results:
        cases = [(b, v, srv) for v, srv in servers.items() for b in BACKENDS]
        done = await asyncio.gather(
            *(one(b, v, srv) for b, v, srv in cases if not isinstance(srv, str))
        )
        found: Results = {(b, v): srv for b, v, srv in cases if isinstance(srv, str)}
        ran = [(b, v) for b, v, srv in cases if not isinstance(srv, str)]
        found.update(zip(ran, done, strict=True))
        return found

    gate = asyncio.Semaphore(AT_ONCE)
    return asyncio.run(all_runs())


@pytest.mark.parametrize("version", [k.name for k in DRA_VERSIONS])
@pytest.mark.parametrize("backend", BACKENDS)
def test_our_driver_passes_every_check(backend: str, version: str, runs: Results) -> None:
    outcomes = runs[(backend, version)]
    if isinstance(outcomes, str):
        pytest.skip(outcomes)
    assert by_status(outcomes, Status.FAILED) == {}
    skipped = by_status(outcomes, Status.SKIPPED)
    allowed = {**NOT_OFFERED, **(GATED_OFF if version == "v1.33" else {})}
    if (backend, version) == ("nvidia", "v1.36"):
        del allowed["shares"]  # a shared GPU, and the field kept: the check must run
    assert {i for i, why in skipped.items() if not why.startswith(allowed.get(i, "\0"))} == set()
    assert len(by_status(outcomes, Status.PASSED)) >= len(outcomes) - len(allowed)
