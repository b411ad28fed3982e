"""Checks of features a driver may not offer: shares, subrequests, admin access.

Each is skipped, with the reason, where the driver publishes nothing that uses
the feature or the API server drops the field (its feature gate is off).
"""

from __future__ import annotations

import uuid
from typing import Any

from accel_plugins.conformance.checks_prepare import check_answer
from accel_plugins.conformance.cluster import Allocated, ClusterError
from accel_plugins.conformance.session import Failed, Session, Skipped


def _stored_results(stored: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (stored.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


async def shares(s: Session) -> str:
    shared = [
        (str(item["spec"]["pool"]["name"]), str(d["name"]))
        for item in await s.cluster.node_slices()
        for d in item["spec"].get("devices") or []
        if d.get("allowMultipleAllocations")
    ]
    if not shared:
        raise Skipped("no published device allows multiple allocations")
    pool, device = shared[0]
    claims = []
    for _ in range(2):
        claim = await s.new_claim([s.cluster.exactly("r0")])
        share = str(uuid.uuid4())
        allocated = [Allocated("r0", s.driver, pool, device, share_id=share)]
        stored = await s.allocate(claim, allocated)
        if not any(r.get("shareID") for r in _stored_results(stored)):
            raise Skipped("the API server dropped shareID (DRAConsumableCapacity is off)")
        claims.append((claim, allocated, share))
    for claim, allocated, share in claims:
        result = await s.prepare_one(claim)
        check_answer(s, result, allocated)
        got = [d.share_id for d in result.devices]
        if got != [share]:
            raise Failed(f"claim {claim.name} holds share {share}; the answer's share_id: {got}")
    return f"two shares of {pool}/{device}, each answered with its share_id"


async def subrequests(s: Session) -> str:
    free = await s.free_devices()
    if not free:
        raise Skipped(f"no free device of {s.driver} on {s.node}")
    spec = s.cluster.exactly("s0")["exactly"]
    try:
        claim = await s.new_claim([{"name": "r0", "firstAvailable": [{"name": "s0", **spec}]}])
    except ClusterError as exc:
        raise Skipped(
            f"the API server refuses subrequests (DRAPrioritizedList off?): {exc}"
        ) from exc
    allocated = [Allocated("r0/s0", s.driver, free[0].pool, free[0].device)]
    await s.allocate(claim, allocated)
    result = await s.prepare_one(claim)
    names = [list(d.requests) for d in result.devices]
    if len(names) != 1 or (names[0] and "r0" not in names[0]):
        raise Failed(
            f"allocated for subrequest r0/s0; the answer's request names {names} leave the "
            "device out of a container that names request r0 (the kubelet matches names exactly)"
        )
    check_answer(s, result, allocated)
    return f"answered with request names {names[0] or '(all requests)'}"


async def admin_access(s: Session) -> str:
    holder, held = await s.claim_for(1)
    await s.prepare_one(holder)
    namespace = await s.cluster.namespace(admin_access=True)
    try:
        claim = await s.new_claim([s.cluster.exactly("monitor", admin_access=True)], namespace)
    except ClusterError as exc:
        raise Skipped(f"the API server refuses admin access (DRAAdminAccess off?): {exc}") from exc
    allocated = [Allocated("monitor", s.driver, held[0].pool, held[0].device, admin_access=True)]
    stored = await s.allocate(claim, allocated)
    if not any(r.get("adminAccess") for r in _stored_results(stored)):
        raise Skipped("the API server dropped adminAccess (DRAAdminAccess is off)")
    result = await s.prepare_one(claim)
    check_answer(s, result, allocated)
    return f"admin access to {held[0].pool}/{held[0].device}, which another claim holds"
