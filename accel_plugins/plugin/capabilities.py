"""Which optional capabilities a backend offers, resolved once per backend."""

from __future__ import annotations

from dataclasses import dataclass

from accel_plugins.plugin.backend import Allocator, PreferredAllocator, PreStarter


@dataclass(frozen=True, slots=True)
class Capabilities:
    allocator: Allocator | None = None
    preferred: PreferredAllocator | None = None
    pre_starter: PreStarter | None = None

    @classmethod
    def of(cls, backend: object) -> Capabilities:
        return cls(
            allocator=backend if isinstance(backend, Allocator) else None,
            preferred=backend if isinstance(backend, PreferredAllocator) else None,
            pre_starter=backend if isinstance(backend, PreStarter) else None,
        )

    @property
    def pre_start_required(self) -> bool:
        return self.pre_starter is not None

    @property
    def get_preferred_allocation_available(self) -> bool:
        # Always offered: without a backend policy the framework's NUMA-aware
        # default answers, which beats the kubelet's arbitrary pick.
        return True
