"""ObservedSlices: the node's slices of one driver as the API server holds them, and the writes.

The publisher's idea of "in sync" rests on this copy, never on what it sent:
it is filled by a list (field selectors ``spec.nodeName`` and ``spec.driver``),
kept current by the watch's events and by the answer to each of our own
writes, and it is what a desired pool is compared with. The writes live here
too because each one needs the held resourceVersion (a replace, or a create
where none is held) and updates the copy from the answer; conflicts and
objects deleted meanwhile are sorted out by reading or forgetting the slice
and trying again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import Status
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.resource_v1 import ResourceSlice

from accel_plugins.dra.kube.api import V1, ResourceApi
from accel_plugins.dra.kube.slices import carry_taint_times, same_slice

WRITE_TRIES = 3


class ObservedSlices:
    """The slices of ``driver`` on ``node`` as last listed, watched or answered to a write.

    ``api`` is the resource.k8s.io version to read and write (the publisher sets
    it once it has asked the API server); ``generation`` the highest pool
    generation seen or written.
    """

    def __init__(self, client: AsyncClient, *, driver: str, node: str) -> None:
        self._client = client
        self._driver = driver
        self._node = node
        self.api: ResourceApi = V1
        self.items: dict[str, ResourceSlice] = {}
        self.listed_version: str | None = None
        self.generation = 0

    def matches(self, desired: list[ResourceSlice]) -> bool:
        """Whether the held slices are exactly ``desired``: the same names, each the same."""
        names = {s.metadata.name for s in desired if s.metadata is not None}
        if set(self.items) != names:
            return False
        return all(
            same_slice(self.items[s.metadata.name], s)
            for s in desired
            if s.metadata is not None and s.metadata.name is not None
        )

    async def relist(self) -> None:
        """Replace what we believe the API server holds with a fresh list of it."""
        listing = self._client.list(self.api.slice_type, fields=self._selector())
        found: dict[str, ResourceSlice] = {}
        async for wire in listing:
            item = self.api.from_wire(wire)
            assert item.metadata is not None
            assert item.metadata.name is not None
            found[item.metadata.name] = item
        self.items = found
        self.listed_version = listing.resourceVersion
        self.generation = max([self.generation, *(s.spec.pool.generation for s in found.values())])

    async def watch(self) -> AsyncIterator[tuple[str, ResourceSlice]]:
        """The watch's events from the last list on; the list's version is used up (a
        watch that ends or fails starts again from a fresh list)."""
        version, self.listed_version = self.listed_version, None
        async for kind, wire in self._client.watch(
            self.api.slice_type, fields=self._selector(), resource_version=version
        ):
            yield kind, self.api.from_wire(wire)

    def event(self, kind: str, item: ResourceSlice) -> bool:
        """Apply a watch event; False where it is older than what we hold (nothing changed)."""
        assert item.metadata is not None
        name = item.metadata.name
        assert name is not None
        held = self.items.get(name)
        if held is not None and _older(item, held):
            return False  # an event about a state our own write already replaced
        if kind == "DELETED":
            self.items.pop(name, None)
        else:
            self.items[name] = item
        return True

    def _selector(self) -> dict[str, str | BinaryOperator | SequenceOperator]:
        return {"spec.nodeName": self._node, "spec.driver": self._driver}

    async def write(self, desired: ResourceSlice) -> ResourceSlice:
        """Create or replace one slice; only a replace carries a resourceVersion.

        Returns the slice as the API server answered it (which may lack fields it dropped).
        """
        assert desired.metadata is not None
        assert desired.metadata.name is not None
        name = desired.metadata.name
        for _ in range(WRITE_TRIES):
            current = self.items.get(name)
            version = current.metadata.resourceVersion if current and current.metadata else None
            try:
                if version is None:
                    desired.metadata.resourceVersion = None
                    written = await self._client.create(self.api.to_wire(desired))
                else:
                    desired.metadata.resourceVersion = version
                    carry_taint_times(desired, self.items.values())
                    written = await self._client.replace(self.api.to_wire(desired))
            except ApiError as exc:
                if exc.status.code == 404 or (exc.status.code == 403 and version is not None):
                    # Gone meanwhile: create it. A node identity is told 403, not 404: the
                    # Node authorizer finds no relationship to an object that is not there.
                    self.items.pop(name, None)
                elif exc.status.code == 409:
                    await self._refresh(name)  # changed or created meanwhile: read it
                else:
                    raise
                continue
            held = self.api.from_wire(written)
            self._observe(held)
            return held
        raise ApiError(status=Status(code=409, message=f"ResourceSlice {name}: conflict"))

    async def _refresh(self, name: str) -> None:
        try:
            self._observe(self.api.from_wire(await self._client.get(self.api.slice_type, name)))
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            self.items.pop(name, None)

    async def delete(self, name: str) -> None:
        try:
            await self._client.delete(self.api.slice_type, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        self.items.pop(name, None)

    def _observe(self, item: ResourceSlice) -> None:
        assert item.metadata is not None
        assert item.metadata.name is not None
        self.items[item.metadata.name] = item


def _older(event: ResourceSlice, held: ResourceSlice) -> bool:
    """Whether ``event`` is older than ``held`` (etcd's resourceVersions are integers)."""
    assert event.metadata is not None
    assert held.metadata is not None
    try:
        return int(event.metadata.resourceVersion or "") < int(held.metadata.resourceVersion or "")
    except ValueError:
        return False
