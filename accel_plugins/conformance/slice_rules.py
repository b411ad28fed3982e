"""What a node's ResourceSlices must satisfy, as pure functions over slices in v1's shape.

The limits are those of resource.k8s.io/v1 (staging/src/k8s.io/api/resource/v1/
types.go): an API server refuses a slice past them, so a driver that breaks one
loses its whole slice, not one device. The kit checks them itself so the
report says which device and which rule, whichever server version it runs on.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE = 64
MAX_TAINTS_PER_DEVICE = 16  # 4 in 1.34, where the API server enforces its own
MAX_DEVICES_ADVANCED = 64  # 1.35+: a slice whose devices have taints or counters
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
VALUE_TYPES = ("bool", "int", "string", "version")


def devices(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((item.get("spec") or {}).get("devices") or [])


def pool(item: Mapping[str, Any]) -> dict[str, Any]:
    return dict((item.get("spec") or {}).get("pool") or {})


def qualified_name_problem(name: str) -> str:
    """A DeviceAttribute/capacity name: a C identifier, optionally after a DNS subdomain."""
    domain, slash, ident = name.rpartition("/")
    if slash and (len(domain) > 63 or not DNS_SUBDOMAIN.fullmatch(domain)):
        return f"{name!r}: the domain is not a DNS subdomain of 63 characters at most"
    if not C_IDENTIFIER.fullmatch(ident):
        return f"{name!r}: {ident!r} is not a C identifier of 32 characters at most"
    return ""


def attribute_problem(name: str, value: Any) -> str:
    if not isinstance(value, Mapping):
        return f"attribute {name}: not an object"
    kinds = [k for k in VALUE_TYPES if value.get(k) is not None]
    if len(kinds) != 1:
        return f"attribute {name}: {len(kinds)} values ({', '.join(kinds) or 'none'}), not one"
    kind, raw = kinds[0], value[kinds[0]]
    if kind in ("string", "version") and len(str(raw)) > MAX_ATTRIBUTE_VALUE:
        return f"attribute {name}: {kind} of {len(str(raw))} characters (at most 64)"
    if kind == "version" and not SEMVER.fullmatch(str(raw)):
        return f"attribute {name}: {raw!r} is not a semantic version"
    return ""


def device_problems(device: Mapping[str, Any]) -> list[str]:
    name = str(device.get("name"))
    out = []
    if not DNS_LABEL.fullmatch(name):
        out.append(f"device {name!r}: the name is not a DNS label")
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        out.append(
            f"device {name}: {len(attributes)} attributes and {len(capacity)} capacities "
            f"(at most {MAX_ATTRIBUTES_AND_CAPACITIES} together)"
        )
    for key in [*attributes, *capacity]:
        problem = qualified_name_problem(key)
        if problem:
            out.append(f"device {name}: {problem}")
    for key, value in attributes.items():
        problem = attribute_problem(key, value)
        if problem:
            out.append(f"device {name}: {problem}")
    return out


def slice_problems(item: Mapping[str, Any]) -> list[str]:
    name = item.get("metadata", {}).get("name")
    found = devices(item)
    out = []
    advanced = any(d.get("taints") or d.get("consumesCounters") for d in found)
    limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES_PER_SLICE
    if len(found) > limit:
        why = " with taints or counters (1.35+)" if advanced else ""
        out.append(f"slice {name}: {len(found)} devices (at most {limit}{why})")
    for device in found:
        out += [f"slice {name}: {p}" for p in device_problems(device)]
    return out


def pool_problems(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per pool: one generation (the newest), resourceSliceCount slices, unique device names."""
    by_pool: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for item in items:
        by_pool[str(pool(item).get("name"))].append(item)
    out = []
    for name, members in sorted(by_pool.items()):
        generations = sorted({int(pool(m).get("generation") or 0) for m in members})
        if len(generations) > 1:
            out.append(f"pool {name}: slices of generations {generations} at once")
        newest = [m for m in members if int(pool(m).get("generation") or 0) == generations[-1]]
        counts = {int(pool(m).get("resourceSliceCount") or 0) for m in newest}
        if counts != {len(newest)}:
            out.append(
                f"pool {name}: {len(newest)} slices of generation {generations[-1]}, "
                f"resourceSliceCount says {sorted(counts)}"
            )
        seen: set[str] = set()
        for m in newest:
            for device in devices(m):
                if device.get("name") in seen:
                    out.append(f"pool {name}: device {device.get('name')} in two slices")
                seen.add(str(device.get("name")))
    return out


def label_key_ok(key: str) -> bool:
    """A label-style key (as taint keys are): ``[prefix/]name``, name 63 characters at most."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(LABEL_NAME.fullmatch(name))


def taint_problems(items: Iterable[Mapping[str, Any]]) -> list[str]:
    out = []
    for item in items:
        for device in devices(item):
            taints = device.get("taints") or []
            name = device.get("name")
            if len(taints) > MAX_TAINTS_PER_DEVICE:
                out.append(f"device {name}: {len(taints)} taints (at most {MAX_TAINTS_PER_DEVICE})")
            for taint in taints:
                key, value = str(taint.get("key")), str(taint.get("value") or "")
                if not label_key_ok(key):
                    out.append(f"device {name}: taint key {key!r} is not a qualified name")
                if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
                    out.append(f"device {name}: taint value {value!r} is not a label value")
                if taint.get("effect") not in TAINT_EFFECTS:
                    out.append(f"device {name}: taint effect {taint.get('effect')!r}")
    return out


def device_keys(items: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(pool, device) of every device in ``items``."""
    return {(str(pool(i).get("name")), str(d.get("name"))) for i in items for d in devices(i)}


def taints_of(items: Iterable[Mapping[str, Any]]) -> int:
    return sum(len(d.get("taints") or []) for item in items for d in devices(item))
