"""Which optional capabilities a backend offers, resolved once per backend,
and the deadline the framework gives each hook call."""

from __future__ import annotations

from dataclasses import dataclass

from accel_plugins.plugin.backend import Allocator, PreferredAllocator, PreStarter


@dataclass(frozen=True, slots=True)
class Capabilities:
    allocator: Allocator | None = None
    preferred: PreferredAllocator | None = None
    pre_starter: PreStarter | None = None
    hook_timeout: float = 10.0

    @classmethod
    def of(cls, backend: object, *, hook_timeout: float = 10.0) -> Capabilities:
        return cls(
            allocator=backend if isinstance(backend, Allocator) else None,
            preferred=backend if isinstance(backend, PreferredAllocator) else None,
            pre_starter=backend if isinstance(backend, PreStarter) else None,
            hook_timeout=hook_timeout,
        )

    @property
    def pre_start_required(self) -> bool:
        return self.pre_starter is not None

    @property
    def get_preferred_allocation_available(self) -> bool:
        # Always offered: without a backend policy the framework's NUMA-aware
        # default answers, which beats the kubelet's arbitrary pick.
        return True
