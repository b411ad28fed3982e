"""``accel-plugins dra-conformance`` as a vendor runs it: a process, its report, exit status, JUnit.

One run starts its own API server from ``$KUBEBUILDER_ASSETS`` (no ``--kubeconfig``) and
the toy driver from ``--driver-command``, which it restarts and "reboots"; another is
pointed at the session's API server with ``--only``, and a required failure exits 1.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("lightkube", reason="the [dra] extra (lightkube) is not installed")

from accel_plugins.conformance.catalogue import CHECKS
from accel_plugins.conformance.envtest import ApiServer, EnvtestUnavailable, assets
from accel_plugins.testing import short_tempdir
from tests.conformance.kit import PYTHON, ROOT, kubeconfig_file
from tests.conformance.test_broken_drivers import toy


async def kit(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        PYTHON,
        "-m",
        "accel_plugins.cli.main",
        "dra-conformance",
        *argv,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_list_names_every_check_and_a_wrong_id_is_a_config_error() -> None:
    code, out = await kit("--list")
    assert code == 0
    for check in CHECKS:
        assert f"\n  {check.id}" in out
    code, out = await kit("--driver", "x.example.com", "--only", "prepare,nope")
    assert code == 2
    assert "--only" in out
    assert "no such check: nope" in out


@pytest.mark.timeout(180)
async def test_the_kit_starts_its_own_api_server_and_the_driver_and_writes_junit() -> None:
    try:
        assets()
    except EnvtestUnavailable as exc:
        pytest.skip(str(exc))
    with short_tempdir("kitcli-") as root:
        code, out = await kit(
            "--driver",
            "toy.conformance.example",
            "--node",
            "node-kit",
            "--plugins-registry-dir",
            str(root / "registry"),
            "--cdi-dir",
            str(root / "cdi"),
            "--workdir",
            str(root / "work"),
            "--junit",
            str(root / "junit.xml"),
            "--driver-command",
            shlex.join(toy("none")),
        )
        assert code == 0, out
        suites = ET.parse(root / "junit.xml").getroot()
    cases = suites.findall(".//testcase")
    assert sorted(c.get("name") or "" for c in cases) == sorted(c.id for c in CHECKS)
    assert suites.findall(".//failure") == []
    # The toy offers no taints and no shared devices; the rest ran, restart and reboot too.
    skipped = {c.get("name") for c in cases if c.find("skipped") is not None}
    assert skipped == {"taints", "shares"}
    assert "PASS  reboot" in out
    assert out.splitlines()[-2].startswith("conformant (required: 13 passed")


async def test_a_required_failure_exits_1(kube_apiserver: ApiServer, kube_node: str) -> None:
    with short_tempdir("kitcli-") as root:
        code, out = await kit(
            "--driver",
            "toy-cli.conformance.example",
            "--node",
            kube_node,
            "--kubeconfig",
            kubeconfig_file(kube_apiserver, root),
            "--plugins-registry-dir",
            str(root / "registry"),
            "--cdi-dir",
            str(root / "cdi"),
            "--workdir",
            str(root / "work"),
            "--only",
            "prepare",
            "--driver-command",
            shlex.join(toy("undefined-cdi-ids")),
        )
    assert code == 1, out
    report = out[out.index("DRA conformance of") :]
    assert [line.split()[:2] for line in report.splitlines()[1:4]] == [
        ["PASS", "registration"],
        ["PASS", "versions"],
        ["FAIL", "prepare"],
    ]
    assert "no spec in" in report
