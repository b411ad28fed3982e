"""What one part of a claim gets: the device-plugin answer for its devices, under the
claim's opaque parameters, a share's limits and admin access.

A claim is answered part by part, each part one CDI device: the devices of one
request, or one share of a device that several claims hold (KEP-5075: each share
has its own ``shareID``, CDI device and entry in the kubelet's answer, so two
shares of one device in one claim stay two). What a part gets:

- plain: the backend's ``allocate`` (else the framework's merge), under the claim's
  opaque parameters for the request when it has some;
- a share: the same, plus what keeps the share to its part of the device where the
  backend can say (:class:`~accel_plugins.plugin.dra_shares.DraShareLimits`;
  NVIDIA's MPS client limits), from the ``shares`` capacity it consumed; the
  claim's own settings win;
- admin access (KEP-5018; the API server admits it only in namespaces labelled
  ``resource.kubernetes.io/admin-access: "true"``): the device as a monitor sees it,
  the backend's ``allocate`` without the claim's sharing settings (a monitor is no
  client of the share), and ``DRA_ADMIN_ACCESS=true`` in the environment, as the
  Kubernetes reference driver (kubernetes-sigs/dra-example-driver) sets it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from accel_plugins.dra.model import AllocatedDevice, ClaimError, NamedDevice, OpaqueConfig
from accel_plugins.plugin import allocation
from accel_plugins.plugin.backend import Allocator
from accel_plugins.plugin.device import ContainerAllocation, Device
from accel_plugins.plugin.dra_config import ClaimParameters, DraConfigAllocator
from accel_plugins.plugin.dra_shares import SHARES, DraShareLimits, Share
from accel_plugins.runtime.hooks import HookFailedError, HookRunner

ADMIN_ACCESS_ENV = "DRA_ADMIN_ACCESS"

_T = TypeVar("_T")


@dataclass(frozen=True)
class Part:
    """Devices of one request answered together: a request's, or one share's."""

    request: str
    share_id: str
    admin: bool
    entries: tuple[tuple[AllocatedDevice, NamedDevice], ...]


def parts(entries: Sequence[tuple[AllocatedDevice, NamedDevice]]) -> list[Part]:
    """The claim's results grouped by request and share, in the order first seen."""
    grouped: dict[tuple[str, str], list[tuple[AllocatedDevice, NamedDevice]]] = {}
    for result, named in entries:
        grouped.setdefault((result.request, result.share_id), []).append((result, named))
    return [
        Part(request, share, any(r.admin_access for r, _ in group), tuple(group))
        for (request, share), group in grouped.items()
    ]


class Hooks(Protocol):
    """The backend's hooks a claim's answer comes from: the driver's Inventory."""

    @property
    def allocator(self) -> Allocator | None: ...

    @property
    def hook_timeout(self) -> float: ...

    @property
    def configurer(self) -> DraConfigAllocator | None: ...

    @property
    def share_limits(self) -> DraShareLimits | None: ...


async def answer(
    hooks: Hooks, driver: str, part: Part, configs: Sequence[OpaqueConfig]
) -> ContainerAllocation:
    """What the part's containers get (its devices and environment)."""
    named = [n for _, n in part.entries]
    if part.admin:
        got = await _allocate(hooks, driver, named, ())
        return dataclasses.replace(got, envs={**got.envs, ADMIN_ACCESS_ENV: "true"})
    got = await _allocate(hooks, driver, named, configs)
    if not part.share_id or hooks.share_limits is None:
        return got
    result, first = part.entries[0]
    share = Share(_consumed_shares(result), first.copies, dict(result.consumed))
    limiter = hooks.share_limits
    devices = [n.device for n in named]

    def call() -> dict[str, str]:
        return dict(limiter.dra_share_env(first.resource, devices, share))

    limits = await _run(hooks, "share limits", first.resource, call)
    return dataclasses.replace(got, envs={**limits, **got.envs})


def _consumed_shares(result: AllocatedDevice) -> int:
    written = result.consumed.get(SHARES, "1")
    if not written.isdigit() or int(written) < 1:
        raise ClaimError(
            f"device {result.device} (request {result.request}): consumedCapacity "
            f"{SHARES}={written!r} is not a whole number of shares"
        )
    return int(written)


async def _allocate(
    hooks: Hooks, driver: str, named: Sequence[NamedDevice], configs: Sequence[OpaqueConfig]
) -> ContainerAllocation:
    """The device-plugin answer for these devices, one resource at a time, merged;
    under the claim's opaque parameters when it has some for them."""
    by_resource: dict[str, list[Device]] = {}
    for entry in named:
        by_resource.setdefault(entry.resource, []).append(entry.device)
    answers = [
        await _allocate_resource(hooks, driver, resource, devices, configs)
        for resource, devices in by_resource.items()
    ]
    return answers[0] if len(answers) == 1 else _combine(answers)


async def _allocate_resource(
    hooks: Hooks,
    driver: str,
    resource: str,
    devices: Sequence[Device],
    configs: Sequence[OpaqueConfig],
) -> ContainerAllocation:
    if configs and hooks.configurer is None:
        # Dropping them would hand out devices without the settings the claim asked for.
        raise ClaimError(
            f"{configs[0].where}: driver {driver} takes no opaque parameters "
            f"for resource {resource}"
        )
    if configs and hooks.configurer is not None:
        configurer = hooks.configurer
        parameters = [ClaimParameters(c.parameters, c.where) for c in configs]

        def call() -> ContainerAllocation:
            return configurer.allocate_configured(resource, devices, parameters)

    elif hooks.allocator is not None:
        allocator = hooks.allocator

        def call() -> ContainerAllocation:
            return allocator.allocate(resource, devices)

    else:
        return allocation.merge(devices)
    return await _run(hooks, "allocate", resource, call)


async def _run(hooks: Hooks, name: str, resource: str, call: Callable[[], _T]) -> _T:
    try:
        return await HookRunner(hooks.hook_timeout).call(name, resource, call)
    except HookFailedError as exc:
        raise ClaimError(exc.message, logged=exc.logged) from None


def _combine(answers: Sequence[ContainerAllocation]) -> ContainerAllocation:
    """Several resources' answers as one (nodes and mounts once per container path)."""
    nodes = {n.container_path: n for a in answers for n in a.nodes}
    mounts = {m.container_path: m for a in answers for m in a.mounts}
    return ContainerAllocation(
        nodes=tuple(nodes.values()),
        mounts=tuple(mounts.values()),
        envs={k: v for a in answers for k, v in a.envs.items()},
        annotations={k: v for a in answers for k, v in a.annotations.items()},
        cdi_devices=tuple(dict.fromkeys(c for a in answers for c in a.cdi_devices)),
    )
