"""Which optional capabilities a backend offers, resolved once per backend,
and the deadline the framework gives each hook call."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from accel_plugins.plugin.allocation import spans_numa_nodes
from accel_plugins.plugin.backend import (
    Allocator,
    CdiSpecKeeper,
    PreferenceScope,
    PreferredAllocator,
    PreStarter,
    cdi_keeper,
)
from accel_plugins.plugin.device import Device

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Capabilities:
    allocator: Allocator | None = None
    preferred: PreferredAllocator | None = None
    pre_starter: PreStarter | None = None
    scope: PreferenceScope | None = None
    cdi_keeper: CdiSpecKeeper | None = None
    hook_timeout: float = 10.0

    @classmethod
    def of(cls, backend: object, *, hook_timeout: float = 10.0) -> Capabilities:
        return cls(
            allocator=backend if isinstance(backend, Allocator) else None,
            preferred=backend if isinstance(backend, PreferredAllocator) else None,
            pre_starter=backend if isinstance(backend, PreStarter) else None,
            scope=backend if isinstance(backend, PreferenceScope) else None,
            cdi_keeper=cdi_keeper(backend),
            hook_timeout=hook_timeout,
        )

    @property
    def pre_start_required(self) -> bool:
        return self.pre_starter is not None

    def prefers(self, resource: str, devices: Collection[Device]) -> bool:
        """Whether GetPreferredAllocation can do better than the kubelet's own pick.

        The backend says so through PreferenceScope; a PreferredAllocator without
        it is always asked; otherwise the framework's NUMA policy has something
        to choose only when the devices span two NUMA nodes or more.
        """
        if self.scope is not None:
            try:
                return bool(self.scope.has_preference(resource, devices))
            except Exception:
                log.exception("resource %s: has_preference failed; advertising it", resource)
                return True
        if self.preferred is not None:
            return True
        return spans_numa_nodes(devices)
