"""Who holds which device in DRA mode, for /metrics: the prepared claims' pods.

In device-plugin mode the kubelet's PodResources API says which container holds a
device. For DRA devices it says so only behind a feature gate
(KubeletPodResourcesDynamicResources), so the driver answers from what it knows: each
prepared claim's devices and the pods the claim was reserved for when it was prepared
(``status.reservedFor``). A claim names pods, not containers: the container is empty,
or :data:`ADMIN` for a claim's admin access (KEP-5018), which monitors a device another
pod holds; no container can be named so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from accel_plugins.dra.checkpoint import PreparedClaim
from accel_plugins.dra.prepare import Inventory
from accel_plugins.plugin.backend import PodRef

ADMIN = "(admin access)"


class ClaimAttribution:
    """The :class:`~accel_plugins.metrics.collectors.Attribution` of a DRA driver."""

    available = True  # the driver's own state: always there to ask

    def __init__(
        self,
        prepared: Callable[[], Mapping[str, PreparedClaim]],
        inventory: Callable[[], Inventory],
    ) -> None:
        self._prepared = prepared
        self._inventory = inventory

    def holders(self, resource: str, device_id: str) -> Sequence[PodRef]:
        return self.holders_of(resource).get(device_id, ())

    def holders_of(self, resource: str) -> Mapping[str, Sequence[PodRef]]:
        """Device ID -> the pods holding it, for the devices of ``resource`` in use."""
        named = self._inventory().devices
        held: dict[str, list[PodRef]] = {}
        for claim in self._prepared().values():
            for prepared in claim.devices:
                device = named.get(prepared.device)
                if device is None or device.resource != resource:
                    continue
                how = ADMIN if prepared.admin else ""
                refs = held.setdefault(device.device.id, [])
                refs.extend(
                    p
                    for p in (PodRef(claim.ref.namespace, pod, how) for pod in claim.consumers)
                    if p not in refs
                )
        return held
