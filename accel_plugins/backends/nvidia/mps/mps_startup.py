"""What ``mps-control-daemon`` serves: the MPS resources ``accel-plugins nvidia`` would publish.

The settings are read as the plugin reads them (:func:`factory.runnable_settings`),
the GPUs found the same way (NVML, or the ``--simulate`` profile), and the tree
built by the same backend, so the daemon and the plugin agree on every MPS
resource and its GPUs. NVIDIA's daemon skips MIG devices with a warning; here
they were refused with the config (exit 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accel_plugins.backends.nvidia.backend import NvidiaBackend
from accel_plugins.backends.nvidia.config.config import NvidiaSettings
from accel_plugins.backends.nvidia.factory import runnable_settings
from accel_plugins.backends.nvidia.mps.mps_control import PROGRAM, fake_program
from accel_plugins.backends.nvidia.mps.mps_daemon import Daemons
from accel_plugins.backends.nvidia.mps.mps_plan import daemon_plans
from accel_plugins.backends.nvidia.mps.mps_root import MpsRoot
from accel_plugins.backends.nvidia.nvml import Nvml, Pynvml
from accel_plugins.backends.nvidia.simulate.builtin_profiles import load_profile
from accel_plugins.backends.nvidia.simulate.simulate import SimulatedNvml


def load_daemons(options: Mapping[str, Any], environ: Mapping[str, str]) -> Daemons:
    """The daemons to run; ConfigError for a bad config, NVML errors as the plugin raises them."""
    settings = runnable_settings(options, environ)
    simulate = options.get("simulate")
    nvml: Nvml
    if simulate:
        nvml = SimulatedNvml(load_profile(simulate))
    else:
        nvml = Pynvml(settings.driver_root, library=options.get("nvml_library"))
    program = options.get("mps_control_path") or (fake_program() if simulate else (PROGRAM,))
    return daemons_for(nvml, settings, program, environ=environ)


def daemons_for(
    nvml: Nvml,
    settings: NvidiaSettings,
    program: Sequence[str],
    *,
    environ: Mapping[str, str] | None = None,
) -> Daemons:
    """The daemons for the MPS resources ``settings`` make of the GPUs ``nvml`` finds."""
    if settings.mps is None:
        return Daemons([], MpsRoot(Path(settings.mps_root or ".")), program)
    backend = NvidiaBackend(nvml, settings)
    node = backend.check()
    plans = daemon_plans(backend.build(node), backend.mps_resources)
    return Daemons(plans, MpsRoot(Path(settings.mps_root)), program, environ=environ)
