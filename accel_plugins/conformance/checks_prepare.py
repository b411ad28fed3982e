"""Checks of NodePrepareResources and NodeUnprepareResources, as the kubelet calls them."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence

from accel_plugins.conformance import cdi_files, checks_registration
from accel_plugins.conformance.cluster import Allocated, Claim
from accel_plugins.conformance.session import Failed, Session, Skipped
from accel_plugins.kubelet_emulator.dra import DraClaimResult
from accel_plugins.kubelet_emulator.errors import PluginCallError

OTHER_DRIVER = "other-driver.conformance.example"


def answer_problems(
    s: Session, result: DraClaimResult, allocated: Sequence[Allocated]
) -> list[str]:
    """How an answer differs from the claim's allocation of this driver's devices."""
    mine = [a for a in allocated if a.driver == s.driver]
    want = sorted((a.pool, a.device) for a in mine)
    got = sorted((d.pool, d.device) for d in result.devices)
    problems = []
    if got != want:
        problems.append(f"answered devices {got}, allocated {want}")
    requests = {(a.pool, a.device): a.request for a in mine}
    # A subrequest's device may be answered under the main request's name, which is what
    # a container names (kubeletplugin strips "r/s" to "r").
    all_requests = {name for a in allocated for name in (a.request, base(a.request))}
    for d in result.devices:
        expected = requests.get((d.pool, d.device), "")
        if d.requests and not {expected, base(expected)} & set(d.requests):
            problems.append(
                f"device {d.pool}/{d.device}: request names {list(d.requests)}, allocated for "
                f"{expected!r}"
            )
        stray = set(d.requests) - all_requests
        if stray:
            problems.append(f"device {d.pool}/{d.device}: unknown request names {sorted(stray)}")
    problems += cdi_files.undefined(result.cdi_ids, s.cdi_dirs)
    return problems


def base(request: str) -> str:
    """The main request of ``request/subrequest``."""
    return request.partition("/")[0]


def check_answer(s: Session, result: DraClaimResult, allocated: Sequence[Allocated]) -> None:
    problems = answer_problems(s, result, allocated)
    if problems:
        raise Failed("\n".join(problems))


def describe(result: DraClaimResult) -> str:
    ids = len(result.cdi_ids)
    return f"{len(result.devices)} devices, {ids} CDI device IDs" + ("" if ids else " (none)")


def same_answer(first: DraClaimResult, second: DraClaimResult) -> str:
    """ "" when both answers give the same devices, requests and CDI IDs; else how they differ."""

    def key(r: DraClaimResult) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
        return sorted(
            (d.pool, d.device, tuple(sorted(d.requests)), tuple(sorted(d.cdi_ids)))
            for d in r.devices
        )

    if key(first) == key(second):
        return ""
    return f"first {key(first)}, then {key(second)}"


async def prepare(s: Session) -> str:
    await checks_registration.wait_for_slices(s)
    count = 2 if len(await s.free_devices()) >= 2 else 1
    claim, allocated = await s.claim_for(count)
    result = await s.prepare_one(claim)
    check_answer(s, result, allocated)
    return f"claim of {count} requests: {describe(result)}, each defined by a valid CDI spec"


async def prepare_idempotent(s: Session) -> str:
    claim, allocated = await s.claim_for(1)
    first = await s.prepare_one(claim)
    second = await s.prepare_one(claim)
    difference = same_answer(first, second)
    if difference:
        raise Failed(f"the second NodePrepareResources answered differently: {difference}")
    check_answer(s, second, allocated)
    return "the same answer twice"


async def released(s: Session, claim: Claim, which: str) -> None:
    """NodeUnprepareResources of ``claim`` answers it without an error (Failed naming
    ``which`` call it was, else)."""
    try:
        errors = await s.unprepare([claim])
    except PluginCallError as exc:
        raise Failed(f"{which} NodeUnprepareResources failed: {exc}") from exc
    if errors.get(claim.uid):
        raise Failed(f"{which} NodeUnprepareResources: {errors[claim.uid]}")
    if claim.uid not in errors:
        raise Failed(f"{which} NodeUnprepareResources left the claim out of its answer")


async def unprepare_idempotent(s: Session) -> str:
    claim, _ = await s.claim_for(1)
    await s.prepare_one(claim)
    for which in ("the first", "the second"):
        await released(s, claim, which)
    return "released twice"


async def unprepare_unknown(s: Session) -> str:
    await released(s, ghost(s, "never-prepared"), "an unknown claim's")
    return "an unknown claim is released without an error"


async def other_drivers(s: Session) -> str:
    free = await s.free_devices()
    if not free:
        raise Skipped(f"no free device of {s.driver} on {s.node}")
    claim = await s.new_claim([s.cluster.exactly("mine"), s.cluster.exactly("theirs")])
    allocated = [
        Allocated("mine", s.driver, free[0].pool, free[0].device),
        Allocated("theirs", OTHER_DRIVER, "other-pool", "other-device"),
    ]
    await s.allocate(claim, allocated)
    result = await s.prepare_one(claim)
    theirs = [d for d in result.devices if d.device == "other-device" or "theirs" in d.requests]
    if theirs:
        raise Failed(f"answered for {OTHER_DRIVER}'s device: {theirs}")
    check_answer(s, result, allocated)
    return f"only its own device of two drivers' ({describe(result)})"


def ghost(s: Session, prefix: str = "no-such-claim") -> Claim:
    """A claim the API server does not have: no driver can prepare it."""
    return Claim(s.cluster.namespaces[0], f"{prefix}-{secrets.token_hex(3)}", secrets.token_hex(16))


async def prepare_error(s: Session) -> str:
    claim = ghost(s)
    try:
        answer = await s.prepare([claim])
    except PluginCallError as exc:
        return f"the call failed ({exc.code.name}), as the kubelet accepts"
    result = answer.get(claim.uid)
    if result is None:
        # api.proto: a claim missing from the answer was not prepared (the kubelet says
        # "skipped" and calls again); reported, if without a reason.
        return "left out of the answer, which the kubelet reports as skipped"
    if not result.error:
        raise Failed(f"a claim that does not exist was prepared: {describe(result)}")
    return f"reported: {result.error.splitlines()[0][:160]}"


async def one_bad_claim(s: Session) -> str:
    good, allocated = await s.claim_for(1)
    bad = ghost(s)
    try:
        answer = await s.prepare([good, bad])
    except PluginCallError as exc:
        raise Failed(f"the whole call failed for one bad claim: {exc}") from exc
    if bad.uid in answer and not answer[bad.uid].error:
        raise Failed("the claim that does not exist got no error")  # left out is reported
    result = answer.get(good.uid)
    if result is None or result.error:
        why = result.error if result else "left out of the answer"
        raise Failed(f"the good claim was not prepared beside the bad one: {why}")
    check_answer(s, result, allocated)
    return "the bad claim failed alone"


async def concurrent(s: Session) -> str:
    count = min(4, len(await s.free_devices()))
    if count < 2:
        raise Skipped("two free devices are needed for two concurrent claims")
    claims = [await s.claim_for(1) for _ in range(count)]
    results = await asyncio.gather(*(s.prepare_one(c) for c, _ in claims))
    for (_, allocated), result in zip(claims, results, strict=True):
        check_answer(s, result, allocated)
    answers = await asyncio.gather(*(s.unprepare([c]) for c, _ in claims))
    errors = [e for a in answers for e in a.values() if e]
    if errors:
        raise Failed(f"concurrent NodeUnprepareResources: {errors}")
    return f"{count} claims prepared and released by concurrent calls"
