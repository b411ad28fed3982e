"""A claim's opaque parameters, for backends that take them (DRA only).

A ResourceClaim (or its DeviceClass) may carry ``opaque`` configs for our
driver: JSON objects in the vendor's own format (NVIDIA's ``GpuConfig``).
The framework reads them from the claim and hands those that apply to a
request, in order (class configs, then the claim's; a later one wins), to
the backend with the request's devices. A backend without this capability
gets a clear per-claim error when a claim carries parameters for it, never a
silent drop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from accel_plugins.errors import AllocationError
from accel_plugins.plugin.device import ContainerAllocation, Device


@dataclass(frozen=True)
class ClaimParameters:
    """One opaque config of a claim: its JSON object and where it stands in the claim."""

    parameters: Mapping[str, object]
    where: str
    """The field path of the object (``status.allocation.devices.config[0].opaque.parameters``)."""


class ClaimParametersError(AllocationError):
    """A claim's opaque parameters are invalid; the message names the field at fault.

    An AllocationError: the claim is refused as worded, never a fault of the backend.
    """

    def __init__(self, where: str, field: str, reason: str) -> None:
        self.where = where
        self.field = field
        self.reason = reason
        super().__init__(f"{where}.{field}: {reason}" if field else f"{where}: {reason}")


@runtime_checkable
class DraConfigAllocator(Protocol):
    """Backend capability: the container contract for devices under a claim's parameters.

    Called off the event loop with the framework's deadline, like ``allocate``.
    ``configs`` holds every config applying to the request, in order; raise
    :class:`ClaimParametersError` for parameters that are invalid or cannot be
    honoured on these devices (AllocationError and HookError also fail the claim).
    """

    def allocate_configured(
        self, resource: str, devices: Sequence[Device], configs: Sequence[ClaimParameters]
    ) -> ContainerAllocation: ...
