"""Checks of what the kubelet and the scheduler see before any claim: registration and slices."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

from accel_plugins.conformance import slice_rules
from accel_plugins.conformance.session import Failed, Session, Skipped
from accel_plugins.kubelet_emulator.dra import DRA_SERVICES, DraClient, driver_name_problem
from accel_plugins.kubelet_emulator.errors import PluginCallError

SETTLE = 5.0  # how long a pool may take to become consistent (a driver mid-update)


async def registration(s: Session) -> str:
    try:
        await s.wait_registered()
    except TimeoutError as exc:
        raise Failed(str(exc)) from exc
    info = s.kubelet.registrations[-1]
    problem = driver_name_problem(info.name)
    if problem:
        raise Failed(problem)
    if not os.path.isabs(info.endpoint):
        raise Failed(f"GetInfo's endpoint {info.endpoint!r} is not an absolute path")
    try:
        mode = os.stat(info.endpoint).st_mode
    except OSError as exc:
        raise Failed(f"GetInfo's endpoint {info.endpoint}: {exc.strerror}") from exc
    if not stat.S_ISSOCK(mode):
        raise Failed(f"GetInfo's endpoint {info.endpoint} is not a unix socket")
    refused = [e for e in s.kubelet.events if "NotifyRegistrationStatus" in e]
    if refused:
        raise Failed(refused[-1])
    return f"{info.name} at {info.endpoint} (registration socket {info.socket})"


async def versions(s: Session) -> str:
    info = s.kubelet.registrations[-1]
    known = [v for v in info.versions if v in DRA_SERVICES]
    if not known:
        raise Failed(
            f"supported_versions {list(info.versions)} names no DRA service the kubelet speaks"
        )
    for service in known:
        client = DraClient(s.driver, Path(info.endpoint), service)
        try:
            await client.prepare([], timeout=s.timeouts.call)
        except PluginCallError as exc:
            raise Failed(f"{service} is advertised but NodePrepareResources fails: {exc}") from exc
        finally:
            await client.close()
    return f"serves {', '.join(known)}; the kubelet uses {info.service}"


async def wait_for_slices(s: Session) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + s.timeouts.register
    while not await s.cluster.node_slices():
        if loop.time() > deadline:
            raise Failed(
                f"no ResourceSlice of {s.driver} for node {s.node} within {s.timeouts.register:g}s"
            )
        await asyncio.sleep(0.5)  # no watch for a kit that may lack list-watch rights


async def settled_slices(s: Session) -> list[dict[str, Any]]:
    """Every slice of the driver once they stop changing (a driver publishes its slices one
    by one): the same names and versions over a second, or what is there after SETTLE."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE

    def key(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [(i["metadata"]["name"], str(i["metadata"].get("resourceVersion"))) for i in items]

    items = await s.cluster.slices()
    stable_since = loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(0.25)
        again = await s.cluster.slices()
        if key(again) != key(items):
            items, stable_since = again, loop.time()
        elif loop.time() - stable_since >= 1.0:
            break
    return items


async def slices_node(s: Session) -> str:
    await wait_for_slices(s)
    every = await settled_slices(s)
    mine = [i for i in every if i["spec"].get("nodeName") == s.node]
    others = [i for i in every if i["spec"].get("nodeName") != s.node]
    my_pools = {str(slice_rules.pool(i).get("name")) for i in mine}
    if s.sole_node:
        wrong = others
        why = "no other node runs the driver here, yet"
    else:
        wrong = [i for i in others if str(slice_rules.pool(i).get("name")) in my_pools]
        why = "pools of this node published for another node too:"
    if wrong:
        names = ", ".join(
            f"{i['metadata']['name']} (node {i['spec'].get('nodeName') or 'none'}, "
            f"pool {slice_rules.pool(i).get('name')})"
            for i in wrong
        )
        raise Failed(f"{why} {names}")
    count = sum(len(slice_rules.devices(i)) for i in mine)
    scope = "" if s.sole_node else " (other nodes' slices not counted: --sole-node not given)"
    return f"{len(mine)} slices, {count} devices, pools {', '.join(sorted(my_pools))}{scope}"


async def slices_pools(s: Session) -> str:
    await wait_for_slices(s)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE
    while problems := slice_rules.pool_problems(await s.cluster.node_slices()):
        if loop.time() > deadline:
            raise Failed("\n".join(problems))
        await asyncio.sleep(0.5)
    return "every pool complete at one generation"


async def slices_valid(s: Session) -> str:
    await wait_for_slices(s)
    items = await s.cluster.node_slices()
    problems = [p for item in items for p in slice_rules.slice_problems(item)]
    if problems:
        raise Failed("\n".join(problems[:20]))
    return f"{sum(len(slice_rules.devices(i)) for i in items)} devices within the API's limits"


async def taints(s: Session) -> str:
    await wait_for_slices(s)
    items = await s.cluster.node_slices()
    if not slice_rules.taints_of(items):
        raise Skipped("no published device is tainted")
    problems = slice_rules.taint_problems(items)
    if problems:
        raise Failed("\n".join(problems[:20]))
    return f"{slice_rules.taints_of(items)} taints well formed"
