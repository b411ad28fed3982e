"""Which DRA capabilities a backend offers, looked up once per backend as device-plugin mode does.

The hooks both modes call (allocate, CDI specs, ...) are the runtime's
:class:`~accel_plugins.runtime.capabilities.Capabilities`; the DRA-only ones are beside
them. The driver resolves them when a backend starts (and again when one is rebuilt);
:class:`RunningCapabilities` answers the API side with the running backend's, or with
the defaults between backends, so the slices never ``isinstance`` a backend per call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from accel_plugins.plugin.device import Device
from accel_plugins.plugin.dra_attributes import DraCounterSets, DraDescriber, DraDeviceInfo
from accel_plugins.plugin.dra_config import DraConfigAllocator
from accel_plugins.plugin.dra_names import DraNamer, dra_device_name
from accel_plugins.plugin.dra_shares import DraSharedUnits, DraShareLimits
from accel_plugins.plugin.dra_taints import DraTaintKeyer
from accel_plugins.runtime.capabilities import Capabilities


@dataclass(frozen=True, slots=True)
class DraCapabilities:
    """The optional capabilities of one backend instance (None: not offered)."""

    common: Capabilities = field(default_factory=Capabilities)
    configurer: DraConfigAllocator | None = None
    describer: DraDescriber | None = None
    namer: DraNamer | None = None
    keyer: DraTaintKeyer | None = None
    counters: DraCounterSets | None = None
    sharer: DraSharedUnits | None = None
    share_limits: DraShareLimits | None = None

    @classmethod
    def of(cls, backend: object, *, hook_timeout: float = 10.0) -> DraCapabilities:
        return cls(
            common=Capabilities.of(backend, hook_timeout=hook_timeout),
            configurer=backend if isinstance(backend, DraConfigAllocator) else None,
            describer=backend if isinstance(backend, DraDescriber) else None,
            namer=backend if isinstance(backend, DraNamer) else None,
            keyer=backend if isinstance(backend, DraTaintKeyer) else None,
            counters=backend if isinstance(backend, DraCounterSets) else None,
            sharer=backend if isinstance(backend, DraSharedUnits) else None,
            share_limits=backend if isinstance(backend, DraShareLimits) else None,
        )


NONE = DraCapabilities()


class RunningCapabilities:
    """The running backend's DRA answers, through ``current`` (read at each call), with
    the framework's defaults where it offers none: the describer, namer, taint keyer,
    counter sets and shared units the API side is given once, at start."""

    def __init__(self, current: Callable[[], DraCapabilities]) -> None:
        self._current = current

    def dra_device(self, resource: str, device: Device) -> DraDeviceInfo:
        describer = self._current().describer
        return describer.dra_device(resource, device) if describer else DraDeviceInfo()

    def dra_device_name(self, resource: str, device: Device) -> str | None:
        namer = self._current().namer
        if namer is not None:
            return namer.dra_device_name(resource, device)
        return dra_device_name(device.id)

    def dra_taint_key(self, resource: str, device: Device) -> str | None:
        keyer = self._current().keyer
        return keyer.dra_taint_key(resource, device) if keyer is not None else None

    def dra_counter_sets(self) -> Mapping[str, Mapping[str, int]]:
        counters = self._current().counters
        return counters.dra_counter_sets() if counters is not None else {}

    def dra_shared_unit(self, resource: str, device: Device) -> str | None:
        sharer = self._current().sharer
        return sharer.dra_shared_unit(resource, device) if sharer is not None else None
