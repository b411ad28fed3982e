"""Allocation records and the pure rules for choosing devices.

The kubelet picks from healthy devices no container holds yet; a plugin's
preferred allocation is only advice, so it is checked before it is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from accel_plugins.kubelet_emulator.errors import InvalidPluginAnswerError
from accel_plugins.kubelet_emulator.model import ContainerResponse

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True, slots=True)
class AllocationRecord:
    """Devices of one resource handed to one container, with the plugin's answer."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
    response: ContainerResponse

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.namespace, self.pod, self.container, self.resource)


class AllocationBook:
    """All current allocations, in the order they were made."""

    def __init__(self, records: Iterable[AllocationRecord] = ()) -> None:
        self._records: list[AllocationRecord] = list(records)

    def __iter__(self) -> Iterator[AllocationRecord]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    @property
    def records(self) -> list[AllocationRecord]:
        return list(self._records)

    def find(
        self, namespace: str, pod: str, container: str, resource: str
    ) -> AllocationRecord | None:
        key = (namespace, pod, container, resource)
        return next((r for r in self._records if r.key == key), None)

    def in_use(self, resource: str) -> set[str]:
        return {d for r in self._records if r.resource == resource for d in r.device_ids}

    def add(self, record: AllocationRecord) -> None:
        if self.find(*record.key) is not None:
            raise ValueError(f"duplicate allocation for {record.key}")
        self._records.append(record)

    def release(self, namespace: str, pod: str) -> list[AllocationRecord]:
        """Drop every record of the pod and return them."""
        freed = [r for r in self._records if (r.namespace, r.pod) == (namespace, pod)]
        self._records = [r for r in self._records if (r.namespace, r.pod) != (namespace, pod)]
        return freed

    def pods(self) -> list[tuple[str, str]]:
        """(namespace, pod) pairs in order of first allocation."""
        return list(dict.fromkeys((r.namespace, r.pod) for r in self._records))

    def of_pod(self, namespace: str, pod: str) -> list[AllocationRecord]:
        return [r for r in self._records if (r.namespace, r.pod) == (namespace, pod)]


def first_sorted(available: Iterable[str], count: int) -> list[str]:
    """The kubelet's choice when the plugin offers no preference (deterministic here)."""
    return sorted(available)[:count]


def check_preferred(
    resource: str,
    preferred: Sequence[str],
    available: Sequence[str],
    count: int,
    must_include: Sequence[str] = (),
) -> list[str]:
    """Validate a GetPreferredAllocation answer; raise naming what is wrong."""
    problems = []
    if len(preferred) != count:
        problems.append(f"returned {len(preferred)} device(s) for a request of {count}")
    duplicates = sorted({d for d in preferred if preferred.count(d) > 1})
    if duplicates:
        problems.append(f"repeated device(s) {', '.join(duplicates)}")
    unknown = sorted(set(preferred) - set(available))
    if unknown:
        problems.append(f"device(s) not offered as available: {', '.join(unknown)}")
    left_out = sorted(set(must_include) - set(preferred))
    if left_out:
        problems.append(f"must-include device(s) left out: {', '.join(left_out)}")
    if problems:
        raise InvalidPluginAnswerError(
            f"GetPreferredAllocation for {resource} is invalid: {'; '.join(problems)}"
        )
    return list(preferred)
