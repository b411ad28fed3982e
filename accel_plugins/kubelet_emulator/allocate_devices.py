"""One container's devices of one resource, as the device manager allocates them.

The devices are chosen (the must-include ones first, then the plugin's
GetPreferredAllocation answer when it offers one, checked, else the lowest
sorted), then the plugin's Allocate is called, and PreStartContainer when the
plugin requires it and the caller asks for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from accel_plugins.kubelet_emulator.allocation import (
    AllocationBook,
    AllocationRecord,
    check_preferred,
    first_sorted,
)
from accel_plugins.kubelet_emulator.errors import (
    InsufficientDevicesError,
    KubeletError,
    ResourceUnavailableError,
    UnknownResourceError,
)
from accel_plugins.kubelet_emulator.state import ResourceState


async def allocate_devices(
    state: ResourceState | None,
    book: AllocationBook,
    namespace: str,
    pod: str,
    container: str,
    resource: str,
    count: int,
    must_include: list[str],
    pre_start: bool = True,
) -> AllocationRecord:
    """The record of a new allocation: ``state`` is the resource's (None: unknown), ``book``
    what containers hold; KubeletError subclasses say why none could be made."""
    if count < 1:
        raise KubeletError(f"cannot allocate {count} of {resource}: count must be positive")
    if state is None:
        raise UnknownResourceError(f"no plugin has registered resource {resource!r}")
    endpoint = state.endpoint
    if endpoint is None or not state.connected:
        raise ResourceUnavailableError(f"the plugin of {resource} is not connected")
    taken = book.in_use(resource)
    # The pod's own devices are offered again only where they are named for reuse.
    reuse = set(must_include) & {
        d for r in book.of_pod(namespace, pod) if r.resource == resource for d in r.device_ids
    }
    available = [d for d in state.view().healthy if d not in taken or d in reuse]
    _check_must_include(resource, must_include, available, count)
    if len(available) < count:
        raise InsufficientDevicesError(resource, count, len(available))
    if len(must_include) == count:
        chosen = list(must_include)  # as the kubelet: reusable devices alone suffice
    elif endpoint.options.get_preferred_allocation_available:
        answer = await endpoint.client.preferred(available, must_include, count)
        chosen = check_preferred(resource, answer, available, count, must_include)
    else:
        rest = [d for d in available if d not in must_include]
        chosen = must_include + first_sorted(rest, count - len(must_include))
    [response] = await endpoint.client.allocate([chosen])
    if pre_start and endpoint.options.pre_start_required:
        await endpoint.client.pre_start(chosen)
    return AllocationRecord(
        namespace=namespace,
        pod=pod,
        container=container,
        resource=resource,
        device_ids=tuple(chosen),
        response=response,
    )


def _check_must_include(
    resource: str, must_include: Sequence[str], available: Sequence[str], count: int
) -> None:
    problems = []
    if len(must_include) > count:
        problems.append(f"{len(must_include)} must-include device(s) for a request of {count}")
    repeated = sorted({d for d in must_include if must_include.count(d) > 1})
    if repeated:
        problems.append(f"repeated device(s) {', '.join(repeated)}")
    missing = sorted(set(must_include) - set(available))
    if missing:
        problems.append(f"not healthy and free: {', '.join(missing)}")
    if problems:
        raise KubeletError(f"cannot allocate {resource}: {'; '.join(problems)}")
