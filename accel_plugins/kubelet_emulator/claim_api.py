"""ResourceClaims read from a real API server through lightkube, for the emulator's admission.

Imported only when an admitted pod has resource claims (lightkube is the
``[dra]`` extra). The client is the DRA driver's (:mod:`accel_plugins.kube.client`),
so ``--kubeconfig`` means the same for both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx2
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.resources.resource_v1 import ResourceClaim

from accel_plugins.kube.client import load_config, make_client
from accel_plugins.kubelet_emulator.claims import AllocatedResult, ClaimInfo, ClaimPrepareError


class KubeClaimReader:
    """One GET per claim, as the DRA manager does (no watch, no cache)."""

    def __init__(self, config: KubeConfig) -> None:
        self._client: AsyncClient = make_client(config)
        # httpx logs every request at INFO: one line per claim read amid the admission
        # output, which prints the outcome anyway.
        logging.getLogger("httpx2").setLevel(logging.WARNING)

    async def get(self, namespace: str, name: str) -> ClaimInfo:
        try:
            found = await self._client.get(ResourceClaim, name, namespace=namespace)
        except ApiError as exc:
            # The kubelet's wording: "fetch ResourceClaim <name>: <the API's message>".
            raise ClaimPrepareError(
                f"fetch ResourceClaim {name}: {exc.status.message or exc}"
            ) from exc
        except httpx2.HTTPError as exc:
            raise ClaimPrepareError(f"fetch ResourceClaim {name}: {exc}") from exc
        meta = found.metadata
        status = found.status
        allocation = status.allocation if status else None
        results = (allocation.devices.results if allocation and allocation.devices else None) or []
        reserved = (status.reservedFor if status else None) or []
        return ClaimInfo(
            namespace=namespace,
            name=name,
            uid=(meta.uid if meta else None) or "",
            allocated=allocation is not None,
            results=tuple(
                AllocatedResult(request=r.request, driver=r.driver, pool=r.pool, device=r.device)
                for r in results
            ),
            reserved_for_pods=tuple(r.name for r in reserved if r.resource == "pods"),
            controller_uids=tuple(
                ref.uid for ref in (meta.ownerReferences if meta else None) or [] if ref.controller
            ),
        )

    async def close(self) -> None:
        await self._client.close()


def reader_factory(kubeconfig: str) -> Callable[[], KubeClaimReader]:
    """Load ``kubeconfig`` now (ConfigError naming it when it cannot be read) and return
    how to make the reader once the event loop runs."""
    config = load_config(kubeconfig)
    return lambda: KubeClaimReader(config)
