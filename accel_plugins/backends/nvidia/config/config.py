"""NVIDIA's plugin config file (format v1), and how it merges with flags and env.

One import for everything the config offers: the settings and their values
(:mod:`.settings`), the file as NVIDIA's plugin reads it (:mod:`.config_file`,
whose docstring shows every field) and the merge with flags and environment
(:mod:`.resolve`).
"""

from __future__ import annotations

from accel_plugins.backends.nvidia.config.config_file import load_config_file, parse_config
from accel_plugins.backends.nvidia.config.resolve import cdi_only_warnings, resolve
from accel_plugins.backends.nvidia.config.settings import (
    DEFAULT_CONTAINER_DRIVER_ROOT,
    DEFAULT_MPS_ROOT,
    DEFAULT_NVIDIA_CTK_PATH,
    DEFAULT_RECOVERY_SECONDS,
    DEVICE_DISCOVERY_STRATEGIES,
    MAX_REPLICAS,
    MIG_STRATEGIES,
    MPS_MAX_CLIENTS,
    POLICY_OF_SHARED,
    REPLICA_POLICIES,
    SHARED_DEVICES_POLICIES,
    VALID_IMEX_CHANNEL_IDS,
    VERSION,
    FileConfig,
    GfdFlags,
    Imex,
    NvidiaSettings,
    Overrides,
    ReplicaDevices,
    ReplicatedResource,
    ResourcePattern,
    TimeSlicing,
    parse_channel_ids,
    parse_device_list_strategy,
    parse_list,
    share_all,
)

__all__ = [
    "DEFAULT_CONTAINER_DRIVER_ROOT",
    "DEFAULT_MPS_ROOT",
    "DEFAULT_NVIDIA_CTK_PATH",
    "DEFAULT_RECOVERY_SECONDS",
    "DEVICE_DISCOVERY_STRATEGIES",
    "MAX_REPLICAS",
    "MIG_STRATEGIES",
    "MPS_MAX_CLIENTS",
    "POLICY_OF_SHARED",
    "REPLICA_POLICIES",
    "SHARED_DEVICES_POLICIES",
    "VALID_IMEX_CHANNEL_IDS",
    "VERSION",
    "FileConfig",
    "GfdFlags",
    "Imex",
    "NvidiaSettings",
    "Overrides",
    "ReplicaDevices",
    "ReplicatedResource",
    "ResourcePattern",
    "TimeSlicing",
    "cdi_only_warnings",
    "load_config_file",
    "parse_channel_ids",
    "parse_config",
    "parse_device_list_strategy",
    "parse_list",
    "resolve",
    "share_all",
]
