"""``accel-plugins migrate NODE --to dra|device-plugin``: move one node between the modes.

It sets the node label the chart's two DaemonSets split on (``kubeletApiSwitch``), then,
with ``--wait``, reports from the API server until the move is done: the old mode's
devices still held, by pod or claim, and the new mode's devices published. The plugins
do the safe part themselves (accel_plugins.switch): this command only labels and watches.

Exit codes: 0 labelled (and, with --wait, done); 2 bad arguments or no kubeconfig;
3 no such node; 4 the API server refused or could not be reached; 5 --wait timed out.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from accel_plugins.switch.model import Mode

if TYPE_CHECKING:
    from lightkube import AsyncClient

EXIT_OK = 0
EXIT_NO_NODE = 3
EXIT_API = 4
EXIT_TIMEOUT = 5
POLL_INTERVAL = 2.0  # seconds between reads while waiting
DONE_PHASES = ("Succeeded", "Failed")  # a finished pod holds no device


@dataclass(frozen=True)
class Progress:
    """One reading of the move to ``to``."""

    to: Mode
    held: tuple[str, ...]  # the old mode's holders, each "namespace/name (what)"
    published: int  # devices the new mode offers on the node

    @property
    def done(self) -> bool:
        return not self.held and self.published > 0

    def describe(self) -> str:
        old = "the device plugin" if self.to == "dra" else "DRA"
        new = "DRA" if self.to == "dra" else "the device plugin"
        held = f"{len(self.held)} held through {old}" + (
            f": {', '.join(self.held)}" if self.held else ""
        )
        return f"{held}; {self.published} device(s) published through {new}"


def ours(resource: str, domains: Sequence[str]) -> bool:
    return any(resource.startswith(f"{d}/") for d in domains)


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


async def read_progress(
    client: AsyncClient, node: str, to: Mode, domains: Sequence[str], drivers: Sequence[str]
) -> Progress:
    """The node's state as the API server has it (pods, claims, slices, allocatable)."""
    from lightkube.resources.core_v1 import Node, Pod
    from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

    def our_driver(name: str | None) -> bool:
        return not drivers or name in drivers

    if to == "dra":
        held = []
        async for pod in client.list(Pod, namespace="*", fields={"spec.nodeName": node}):
            status = pod.status
            if status is not None and (
                status.phase in DONE_PHASES or status.extendedResourceClaimStatus is not None
            ):
                continue  # finished, or served by DRA already (KEP-5004's claim)
            asked: dict[str, int] = {}
            for c in [*(pod.spec.initContainers or []), *pod.spec.containers] if pod.spec else []:
                limits = (c.resources.limits or {}) if c.resources else {}
                for name, value in limits.items():
                    if ours(name, domains):
                        asked[name] = asked.get(name, 0) + _count(value)
            if asked and pod.metadata is not None:
                what = ", ".join(f"{k} {v}" for k, v in sorted(asked.items()))
                held.append(f"{pod.metadata.namespace}/{pod.metadata.name} ({what})")
        published = 0
        async for item in client.list(ResourceSlice, fields={"spec.nodeName": node}):
            if our_driver(item.spec.driver):
                published += len(item.spec.devices or [])
        return Progress(to, tuple(sorted(held)), published)

    claims = []
    async for claim in client.list(ResourceClaim, namespace="*"):
        allocation = claim.status.allocation if claim.status is not None else None
        results = allocation.devices.results if allocation and allocation.devices else None
        mine = [r for r in results or [] if r.pool == node and our_driver(r.driver)]
        if mine and claim.metadata is not None and claim.status is not None:
            pods = ",".join(r.name for r in claim.status.reservedFor or []) or "no pod"
            claims.append(f"{claim.metadata.namespace}/{claim.metadata.name} (pods {pods})")
    found = await client.get(Node, node)
    allocatable = (found.status.allocatable or {}) if found.status is not None else {}
    published = sum(_count(v) for k, v in allocatable.items() if ours(k, domains))
    return Progress(to, tuple(sorted(claims)), published)


async def migrate(
    client: AsyncClient,
    node: str,
    to: Mode,
    *,
    label: str,
    wait: bool,
    timeout: float,
    domains: Sequence[str],
    drivers: Sequence[str],
    out: TextIO,
    interval: float = POLL_INTERVAL,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Label ``node`` for ``to``; with ``wait``, print progress until done or ``timeout``."""
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.core_v1 import Node
    from lightkube.types import PatchType

    try:
        found = await client.get(Node, node)
        was = (found.metadata.labels or {}).get(label) if found.metadata else None
        patch = {"metadata": {"labels": {label: to}}}
        await client.patch(Node, node, patch, patch_type=PatchType.MERGE)
    except ApiError as exc:
        if exc.status.code == 404:
            print(f"accel-plugins migrate: no node {node!r}", file=out)
            return EXIT_NO_NODE
        print(f"accel-plugins migrate: the API server refused: {exc.status.message}", file=out)
        return EXIT_API
    print(f"node {node}: {label}={to} (was {was or 'unset'})", file=out, flush=True)
    if not wait:
        return EXIT_OK
    deadline = clock() + timeout
    last = ""
    while True:
        try:
            progress = await read_progress(client, node, to, domains, drivers)
        except ApiError as exc:
            print(f"accel-plugins migrate: the API server refused: {exc.status.message}", file=out)
            return EXIT_API
        text = progress.describe()
        if progress.done:
            print(f"done: {text}", file=out, flush=True)
            return EXIT_OK
        if text != last:
            print(f"waiting: {text}", file=out, flush=True)
            last = text
        if clock() >= deadline:
            print(f"accel-plugins migrate: not done after {timeout:g} s: {text}", file=out)
            return EXIT_TIMEOUT
        await asyncio.sleep(interval)


def run_command(args: argparse.Namespace) -> int:
    """``accel-plugins migrate``'s parsed arguments, run against the API server."""
    import httpx2

    from accel_plugins.kube.client import load_config, make_client
    from accel_plugins.util.logs import fatal

    client = make_client(load_config(args.kubeconfig or None))

    async def run() -> int:
        try:
            return await migrate(
                client,
                args.node,
                args.to,
                label=args.label,
                wait=args.wait,
                timeout=args.timeout,
                domains=args.domain or ["nvidia.com"],
                drivers=args.driver or [],
                out=sys.stdout,
            )
        except httpx2.TransportError as exc:
            fatal(f"accel-plugins migrate: cannot reach the API server: {exc}")
            return EXIT_API
        finally:
            await client.close()

    return asyncio.run(run())
