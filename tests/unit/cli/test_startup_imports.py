"""What a plugin process imports on its way to registration (issue 17's start-up budget).

Opt-in features (CDI specs, MPS, NFD labels, DRA), the simulated node and
code first needed by a later RPC or scrape load where they are used. Each
case imports what ``accel-plugins <backend>`` imports before it serves, in a
fresh interpreter, and names the modules that must not be there yet.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

RUN_PATH = (
    "accel_plugins.cli.main",
    "accel_plugins.metrics.address",
    "accel_plugins.runtime.config_watch",
    "accel_plugins.deviceplugin.manager",
    "accel_plugins.runtime.podresources",
    "accel_plugins.runtime.recorder",
)

# Metrics load once the kubelet has the devices (cli.serve): registration never waits for them.
METRICS = ("prometheus_client", "accel_plugins.metrics.collectors", "accel_plugins.metrics.wiring")
# Plugin-watcher registration (another mode), the IDNA codec (getaddrinfo on a host name) and
# json (JSON logs only; prometheus_client brings it after registration).
ELSEWHERE = ("accel_plugins.runtime.plugin_watcher", "encodings.idna", "json")

NOT_BEFORE_SERVING = {
    "nvidia": (
        "yaml",  # no --config: nothing to parse
        "pynvml",  # loaded by Pynvml.init, not at import
        "accel_plugins.plugin.cdi",
        "accel_plugins.backends.nvidia.cdi.cdi_spec",
        "accel_plugins.backends.nvidia.mps.mps_root",
        "accel_plugins.backends.nvidia.mps.mps_readiness",
        "accel_plugins.backends.nvidia.labels.label_facts",
        "accel_plugins.backends.nvidia.labels.node_labels",
        "accel_plugins.backends.nvidia.dra_attributes",
        "accel_plugins.backends.nvidia.telemetry",
        "accel_plugins.backends.nvidia.allocation.preferred_allocation",
        # the link matrix: first preference
        "accel_plugins.backends.nvidia.allocation.best_effort_search",
        "accel_plugins.backends.nvidia.simulate.simulate",
        "accel_plugins.backends.nvidia.simulate.simulated_profile",
        "accel_plugins.plugin.dra_attributes",
        "accel_plugins.dra",
        "difflib",
        *METRICS,
        *ELSEWHERE,
    ),
    "generic": (
        "accel_plugins.plugin.cdi",
        "accel_plugins.backends.generic.dra_attributes",
        "accel_plugins.plugin.dra_attributes",
        "accel_plugins.dra",
        *METRICS,
        *ELSEWHERE,
    ),
}


@pytest.mark.parametrize("backend", sorted(NOT_BEFORE_SERVING))
def test_the_run_path_leaves_opt_in_modules_unloaded(backend: str) -> None:
    modules = (*RUN_PATH, f"accel_plugins.backends.{backend}.factory")
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"print('\\n'.join(m for m in {NOT_BEFORE_SERVING[backend]!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == []
