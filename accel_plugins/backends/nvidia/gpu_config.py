"""NVIDIA's ``GpuConfig``: a claim's opaque parameters in the shape NVIDIA's DRA driver takes.

Facts from NVIDIA/k8s-dra-driver-gpu ``api/nvidia.com/resource/v1beta1``
(``api.go``, ``gpuconfig.go``, ``sharing.go``, ``validate.go``)::

    apiVersion: resource.nvidia.com/v1beta1
    kind: GpuConfig
    sharing:
      strategy: TimeSlicing | MPS          # Fabric: known, refused (not enabled)
      timeSlicingConfig:                   # TimeSlicing only
        interval: Default | Short | Medium | Long
      mpsConfig:                           # MPS only
        defaultActiveThreadPercentage: 0..100
        defaultPinnedDeviceMemoryLimit: <quantity>
        defaultPerDevicePinnedMemoryLimit: {<uuid or index>: <quantity>}

Defaults as NVIDIA's ``Normalize``: no ``sharing`` is time-slicing, a
time-slicing config without ``timeSlicingConfig`` has interval ``Default``, an
MPS config without ``mpsConfig`` has no limits. A config of one strategy with
the other's section is refused (``GetTimeSlicingConfig``/``GetMpsConfig``). A
memory limit is whole MiB and must be at least 1 MiB (``limit.Megabyte``); a
per-device key is a GPU UUID of the request or an index into its devices
(``uuidSet.Normalize``). Unknown fields are refused, as NVIDIA's strict decoder
does, so a misspelt field is an error rather than a silent default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from accel_plugins.plugin.dra_config import ClaimParametersError
from accel_plugins.util.quantity import parse_quantity

API_VERSION = "resource.nvidia.com/v1beta1"
KIND = "GpuConfig"
TIME_SLICING = "TimeSlicing"
MPS = "MPS"
FABRIC = "Fabric"
INTERVALS = ("Default", "Short", "Medium", "Long")
DEFAULT_INTERVAL = "Default"
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class MpsLimits:
    """Per-client MPS limits a claim asks for; None/empty where it sets none."""

    active_thread_percentage: int | None = None
    pinned_memory_mib: int | None = None
    """``defaultPinnedDeviceMemoryLimit``, for every GPU of the request."""
    per_device_mib: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """``defaultPerDevicePinnedMemoryLimit`` as written: UUID or index -> MiB."""


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """A validated, defaulted ``GpuConfig.sharing``."""

    strategy: str = TIME_SLICING
    interval: str = DEFAULT_INTERVAL
    mps: MpsLimits = field(default_factory=MpsLimits)


def _object(value: object, where: str, path: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise ClaimParametersError(where, path, f"must be an object, not {value!r}")
    return value


def _known(value: Mapping[str, object], known: Sequence[str], where: str, path: str) -> None:
    for key in value:
        if key not in known:
            prefix = f"{path}." if path else ""
            raise ClaimParametersError(
                where, f"{prefix}{key}", f"unknown field (known: {', '.join(known)})"
            )


def _mib(value: object, where: str, path: str) -> int:
    try:
        amount = parse_quantity(value)
    except ValueError as exc:
        raise ClaimParametersError(where, path, str(exc)) from None
    mib = int(amount) // MIB
    if mib <= 0:
        raise ClaimParametersError(where, path, f"{value!r} is below 1Mi: limits are whole MiB")
    return mib


def _mps(value: object, where: str) -> MpsLimits:
    path = "sharing.mpsConfig"
    config = _object(value, where, path)
    _known(
        config,
        (
            "defaultActiveThreadPercentage",
            "defaultPinnedDeviceMemoryLimit",
            "defaultPerDevicePinnedMemoryLimit",
        ),
        where,
        path,
    )
    percentage = config.get("defaultActiveThreadPercentage")
    if percentage is not None:
        field_path = f"{path}.defaultActiveThreadPercentage"
        if isinstance(percentage, bool) or not isinstance(percentage, int):
            raise ClaimParametersError(where, field_path, f"must be an integer, not {percentage!r}")
        if percentage < 0:
            raise ClaimParametersError(where, field_path, "must not be negative")
        if percentage > 100:
            raise ClaimParametersError(where, field_path, "must not be greater than 100")
    pinned = config.get("defaultPinnedDeviceMemoryLimit")
    per_device = config.get("defaultPerDevicePinnedMemoryLimit")
    limits: dict[str, int] = {}
    if per_device is not None:
        table = _object(per_device, where, f"{path}.defaultPerDevicePinnedMemoryLimit")
        for key, limit in table.items():
            limits[key] = _mib(limit, where, f"{path}.defaultPerDevicePinnedMemoryLimit[{key}]")
    pinned_path = f"{path}.defaultPinnedDeviceMemoryLimit"
    return MpsLimits(
        active_thread_percentage=percentage,
        pinned_memory_mib=None if pinned is None else _mib(pinned, where, pinned_path),
        per_device_mib=MappingProxyType(limits),
    )


def parse_gpu_config(parameters: Mapping[str, object], where: str) -> GpuSharing:
    """The sharing a ``GpuConfig`` asks for; ClaimParametersError names the field at fault."""
    _known(parameters, ("apiVersion", "kind", "sharing", "driverConfig"), where, "")
    if parameters.get("apiVersion") != API_VERSION:
        raise ClaimParametersError(
            where, "apiVersion", f"{parameters.get('apiVersion')!r} is not {API_VERSION!r}"
        )
    if parameters.get("kind") != KIND:
        raise ClaimParametersError(
            where, "kind", f"{parameters.get('kind')!r} is not {KIND!r} (the only kind served)"
        )
    driver_config = parameters.get("driverConfig")
    if driver_config is not None:
        driver = _object(driver_config, where, "driverConfig")
        _known(driver, ("driver",), where, "driverConfig")
        if driver.get("driver", "nvidia") != "nvidia":
            raise ClaimParametersError(
                where, "driverConfig.driver", f"{driver.get('driver')!r}: only 'nvidia' is served"
            )
    raw = parameters.get("sharing")
    if raw is None:
        return GpuSharing()
    sharing = _object(raw, where, "sharing")
    _known(sharing, ("strategy", "timeSlicingConfig", "mpsConfig"), where, "sharing")
    strategy = sharing.get("strategy")
    if strategy == FABRIC:
        raise ClaimParametersError(
            where, "sharing.strategy", "fabric GPU sharing strategy is not enabled"
        )
    if strategy not in (TIME_SLICING, MPS):
        raise ClaimParametersError(
            where,
            "sharing.strategy",
            f"unknown GPU sharing strategy {strategy!r} (known: {TIME_SLICING}, {MPS})",
        )
    if strategy == TIME_SLICING:
        if sharing.get("mpsConfig") is not None:
            raise ClaimParametersError(
                where, "sharing.mpsConfig", f"cannot be used with the {TIME_SLICING} strategy"
            )
        interval = DEFAULT_INTERVAL
        if sharing.get("timeSlicingConfig") is not None:
            config = _object(sharing["timeSlicingConfig"], where, "sharing.timeSlicingConfig")
            _known(config, ("interval",), where, "sharing.timeSlicingConfig")
            chosen = config.get("interval", DEFAULT_INTERVAL)
            if chosen not in INTERVALS:
                raise ClaimParametersError(
                    where,
                    "sharing.timeSlicingConfig.interval",
                    f"unknown time-slice interval {chosen!r} (known: {', '.join(INTERVALS)})",
                )
            interval = str(chosen)
        return GpuSharing(TIME_SLICING, interval)
    if sharing.get("timeSlicingConfig") is not None:
        raise ClaimParametersError(
            where, "sharing.timeSlicingConfig", f"cannot be used with the {MPS} strategy"
        )
    mps = sharing.get("mpsConfig")
    return GpuSharing(MPS, mps=MpsLimits() if mps is None else _mps(mps, where))


def last_sharing(configs: Sequence[tuple[Mapping[str, object], str]]) -> GpuSharing:
    """Every config validated (a bad one fails the claim even when a later one wins);
    the last one's sharing applies, as NVIDIA applies the last matching config."""
    parsed = [parse_gpu_config(parameters, where) for parameters, where in configs]
    return parsed[-1] if parsed else GpuSharing()
