"""Running the conformance kit in the tests: a target for a driver command, and its outcomes."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from accel_plugins.conformance.command import conform
from accel_plugins.conformance.envtest import ApiServer
from accel_plugins.conformance.report import Outcome, Status
from accel_plugins.conformance.runner import Target
from accel_plugins.conformance.session import Timeouts

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def kubeconfig_file(server: ApiServer, where: Path) -> str:
    path = where / "kubeconfig"
    path.write_text(json.dumps(server.kubeconfig()))  # JSON is YAML
    return str(path)


async def run_kit(
    server: ApiServer,
    root: Path,
    *,
    driver: str,
    node: str,
    command: Sequence[str],
    sole_node: bool = False,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    repair: float = 70.0,
) -> dict[str, Outcome]:
    """Check ``driver``, started by ``command``, against ``server``; outcomes by check ID."""
    (root / "cdi").mkdir(parents=True, exist_ok=True)
    (root / "work").mkdir(exist_ok=True)
    target = Target(
        driver=driver,
        node=node,
        registry=root / "registry",
        cdi_dirs=(root / "cdi",),
        command=tuple(command),
        workdir=root / "work",
        sole_node=sole_node,
        timeouts=Timeouts(call=30.0, register=30.0, repair=repair),
    )
    outcomes = await conform(
        target, kubeconfig_file(server, root), only=only, skip=skip, owned=False
    )
    return {o.check.id: o for o in outcomes}


def by_status(outcomes: dict[str, Outcome], status: Status) -> dict[str, str]:
    return {i: o.message for i, o in outcomes.items() if o.status is status}
