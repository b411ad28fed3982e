"""``accel-plugins nvidia``: the entry point (group ``accel_plugins.backends``).

Cheap to import: ``accel-plugins --help`` loads it to list the backend. NVML,
YAML and the backend itself are imported inside :func:`build`. The choices
below mirror constants of the heavy modules (config.py, container_contract.py,
builtin_profiles.py); tests/unit/test_cli_backends.py keeps them equal.

Every flag has its ``ACCEL_PLUGINS_<FLAG>`` twin and, where NVIDIA's plugin has
one, NVIDIA's own variable (``MIG_STRATEGY``, ``CONFIG_FILE``...). Unset flags
are None so the config file can fill them: flag > env > file > default.
"""

from __future__ import annotations

from accel_plugins.flags import parse_bool
from accel_plugins.plugin.command import BackendCommand, BackendContext, BackendFactory, Option

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_ID_STRATEGIES = ("uuid", "index")
REPLICA_POLICIES = ("spread", "packed")
SHARED_DEVICES_POLICIES = ("distributed", "packed")
DEFAULT_RECOVERY_SECONDS = 60.0
SIMULATED_PROFILES = ("a100-mig", "dgx-a100", "dgx-h100", "pcie-4gpu", "pcie-8gpu-nvlink-pairs")


def _device_list(text: str) -> tuple[str, ...]:
    from accel_plugins.backends.nvidia.config import parse_device_list_strategy

    return parse_device_list_strategy(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected seconds, got {text!r}") from None
    if value < 0:
        raise ValueError(f"must be >= 0, got {text!r}")
    return value


OPTIONS = (
    Option(
        "--config",
        "NVIDIA device plugin config file (format v1); flags and env win over it",
        env=("CONFIG_FILE",),
        metavar="FILE",
    ),
    Option(
        "--simulate",
        f"serve a simulated node instead of NVML: {', '.join(SIMULATED_PROFILES)}, or a YAML file",
        metavar="PROFILE_OR_FILE",
    ),
    Option(
        "--mig-strategy",
        "how MIG devices are offered (built-in default none)",
        choices=MIG_STRATEGIES,
        env=("MIG_STRATEGY",),
    ),
    Option(
        "--device-list-strategy",
        "envvar, volume-mounts, cdi-annotations, cdi-cri, comma-separated (default envvar)",
        type=_device_list,
        env=("DEVICE_LIST_STRATEGY",),
        metavar="STRATEGY[,STRATEGY]",
    ),
    Option(
        "--device-id-strategy",
        "name devices to the runtime by uuid or index (default uuid)",
        choices=DEVICE_ID_STRATEGIES,
        env=("DEVICE_ID_STRATEGY",),
    ),
    Option(
        "--pass-device-specs",
        "also hand the /dev/nvidia* nodes to the kubelet on Allocate (default false)",
        type=parse_bool,
        env=("PASS_DEVICE_SPECS",),
    ),
    Option(
        "--fail-on-init-error",
        "exit 1 when NVML cannot start; false idles with no devices (default true)",
        type=parse_bool,
        env=("FAIL_ON_INIT_ERROR",),
    ),
    Option(
        "--nvidia-driver-root",
        "where the driver is installed, e.g. / or /run/nvidia/driver (default /)",
        env=("NVIDIA_DRIVER_ROOT",),
        metavar="DIR",
    ),
    Option(
        "--health-recovery-seconds",
        "quiet time before an Unhealthy GPU is probed and may recover; 0 never "
        f"(default {DEFAULT_RECOVERY_SECONDS:g})",
        type=_seconds,
        metavar="SECONDS",
    ),
    Option(
        "--shared-devices-allocation-policy",
        "how a request's time-sliced replicas are chosen: distributed over distinct GPUs, or "
        "packed onto one GPU first (default distributed; config "
        "flags.plugin.sharedDevicesAllocationPolicy)",
        choices=SHARED_DEVICES_POLICIES,
        env=("SHARED_DEVICES_ALLOCATION_POLICY",),
    ),
    Option(
        "--replica-policy",
        "our older name for --shared-devices-allocation-policy: spread (= distributed) or "
        "packed (config sharing.timeSlicing.replicaPolicy)",
        choices=REPLICA_POLICIES,
    ),
    Option(
        "--nvml-library",
        "load this libnvidia-ml.so.1 instead of searching the system and driver root",
        metavar="PATH",
    ),
)


def build(ctx: BackendContext) -> BackendFactory:
    """Validate the config file (and --simulate) now; the factory re-reads the file (SIGHUP)."""
    from accel_plugins.backends.nvidia.factory import backend_factory

    return backend_factory(ctx.options, ctx.environ)


COMMAND = BackendCommand(
    summary="expose NVIDIA GPUs and MIG devices through NVML",
    build=build,
    options=OPTIONS,
    requires=("pynvml",),
    extra="nvidia",
)
