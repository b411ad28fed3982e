"""``accel-plugins nvidia``: the entry point (group ``accel_plugins.backends``).

Cheap to import: ``accel-plugins --help`` loads it to list the backend. NVML,
YAML and the backend itself are imported inside :func:`build`. The choices
below mirror constants of the heavy modules (config.py, container_contract.py,
builtin_profiles.py); tests/unit/cli/test_cli_backends.py keeps them equal.

Every flag of NVIDIA's plugin (``cmd/nvidia-device-plugin/main.go``) is here
under NVIDIA's name and aliases, with NVIDIA's variables (``MIG_STRATEGY``,
``CONFIG_FILE``, ``GDS_ENABLED``...) besides our ``ACCEL_PLUGINS_<FLAG>``
twin. Unset flags are None so the config file can fill them: flag > env >
file > default.
"""

from __future__ import annotations

from accel_plugins.plugin.command import BackendCommand, BackendContext, BackendFactory, Option
from accel_plugins.util.flags import parse_bool

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_ID_STRATEGIES = ("uuid", "index")
REPLICA_POLICIES = ("spread", "packed")
SHARED_DEVICES_POLICIES = ("distributed", "packed")
DEVICE_DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra")
DEFAULT_RECOVERY_SECONDS = 60.0
SIMULATED_PROFILES = ("a100-mig", "dgx-a100", "dgx-h100", "pcie-4gpu", "pcie-8gpu-nvlink-pairs")


def _device_list(text: str) -> tuple[str, ...]:
    from accel_plugins.backends.nvidia.config.config import parse_device_list_strategy

    return parse_device_list_strategy(text)


def _channel_ids(text: str) -> tuple[int, ...]:
    from accel_plugins.backends.nvidia.config.config import parse_channel_ids

    return parse_channel_ids(text)


def _list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


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
        aliases=("--config-file",),
    ),
    Option(
        "--strict-config",
        "refuse config keys NVIDIA's v1 does not define (default false: they load with a "
        "warning, as NVIDIA's plugin ignores them)",
        type=parse_bool,
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
        "--fail-on-init-error",
        "exit 1 when NVML cannot start; false idles with no devices (default true)",
        type=parse_bool,
        env=("FAIL_ON_INIT_ERROR",),
    ),
    Option(
        "--nvidia-driver-root",
        "where the driver is installed on the host, e.g. / or /run/nvidia/driver (default /)",
        env=("NVIDIA_DRIVER_ROOT",),
        metavar="DIR",
        aliases=("--driver-root",),
    ),
    Option(
        "--nvidia-dev-root",
        "where the GPU device nodes are on the host (default: the driver root)",
        env=("NVIDIA_DEV_ROOT",),
        metavar="DIR",
        aliases=("--dev-root",),
    ),
    Option(
        "--pass-device-specs",
        "also hand the /dev/nvidia* nodes to the kubelet on Allocate (default false)",
        type=parse_bool,
        env=("PASS_DEVICE_SPECS",),
    ),
    Option(
        "--device-list-strategy",
        "envvar, volume-mounts, cdi-annotations, cdi-cri, comma-separated (default envvar; "
        "cdi-cri with --kubelet-api dra, unless --simulate)",
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
        "--gdrcopy-enabled",
        "NVIDIA_GDRCOPY=enabled in every container that gets a GPU (default false)",
        type=parse_bool,
        env=("GDRCOPY_ENABLED",),
    ),
    Option(
        "--gds-enabled",
        "NVIDIA_GDS=enabled (GPUDirect Storage) in every container that gets a GPU (default false)",
        type=parse_bool,
        env=("GDS_ENABLED",),
    ),
    Option(
        "--mofed-enabled",
        "NVIDIA_MOFED=enabled in every container that gets a GPU (default false)",
        type=parse_bool,
        env=("MOFED_ENABLED",),
    ),
    Option(
        "--cdi-annotation-prefix",
        "prefix of the CDI annotation keys (default cdi.k8s.io/)",
        env=("CDI_ANNOTATION_PREFIX",),
        metavar="PREFIX",
    ),
    Option(
        "--cdi-spec-dir",
        "with a CDI device-list strategy, write the CDI specs here (default /var/run/cdi)",
        env=("CDI_SPEC_DIR",),
        metavar="DIR",
    ),
    Option(
        "--nvidia-cdi-hook-path",
        "the hook program the CDI specs' OCI hooks run (default /usr/bin/nvidia-ctk; "
        "empty: no hooks)",
        env=("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"),
        metavar="PATH",
        aliases=("--nvidia-ctk-path",),
    ),
    Option(
        "--driver-root-ctr-path",
        "where NVIDIA's chart mounts the driver root in the plugin container (default "
        "/driver-root; read and kept: this plugin sees the driver root at its host path)",
        env=("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        metavar="DIR",
        aliases=("--container-driver-root",),
    ),
    Option(
        "--mps-root",
        "host directory of the MPS control daemon's files (needed by sharing.mps)",
        env=("MPS_ROOT",),
        metavar="DIR",
    ),
    Option(
        "--device-discovery-strategy",
        "auto, nvml or tegra (default auto, which is nvml here; tegra is not supported)",
        choices=DEVICE_DISCOVERY_STRATEGIES,
        env=("DEVICE_DISCOVERY_STRATEGY",),
    ),
    Option(
        "--imex-channel-ids",
        "IMEX channels every container with a GPU gets: empty or 0 (config imex.channelIDs)",
        type=_channel_ids,
        env=("IMEX_CHANNEL_IDS",),
        metavar="ID[,ID]",
    ),
    Option(
        "--imex-required",
        "exit 2 at start when a requested IMEX channel does not exist (default false: skip it)",
        type=parse_bool,
        env=("IMEX_REQUIRED",),
    ),
    Option(
        "--cdi-feature-flags",
        "feature flags for CDI spec generation, comma-separated (disable-ipc-discoverer, "
        "no-additional-gids-for-device-nodes; others are ignored with a warning)",
        type=_list,
        env=("CDI_FEATURE_FLAGS",),
        metavar="FLAG[,FLAG]",
    ),
    Option(
        "--cdi-disable-hooks",
        "OCI hooks to leave out of the CDI specs (create-symlinks, enable-cuda-compat, "
        "update-ldcache, disable-device-node-modification), or all",
        type=_list,
        env=("CDI_DISABLE_HOOKS",),
        metavar="HOOK[,HOOK]",
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
    Option(
        "--nfd-features-file",
        "keep the node's GPU labels (gpu-feature-discovery's names) in this Node Feature "
        "Discovery feature file, e.g. /etc/kubernetes/node-feature-discovery/features.d/"
        "accel-plugins-nvidia; empty: off",
        default="",
        metavar="FILE",
    ),
)


def build(ctx: BackendContext) -> BackendFactory:
    """Validate the config file (and --simulate) now; the factory re-reads the file (SIGHUP)."""
    from accel_plugins.backends.nvidia.factory import backend_factory

    dra = ctx.kubelet_api == "dra"
    return backend_factory(ctx.options, ctx.environ, dra_cdi_dir=ctx.cdi_spec_dir if dra else None)


COMMAND = BackendCommand(
    summary="expose NVIDIA GPUs and MIG devices through NVML",
    build=build,
    options=OPTIONS,
    requires=("pynvml",),
    extra="nvidia",
    config_files=("--config",),
    # NVIDIA's own DRA driver's name: its DeviceClass gpu.nvidia.com selects our GPUs too.
    dra_driver_name="gpu.nvidia.com",
)
