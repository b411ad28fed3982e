"""Simulated node descriptions: the data table behind the simulated NVML.

A profile is what ``--simulate FILE`` reads (YAML) and what the built-in
profiles in ``builtin_profiles.py`` are written as (plain dicts of the same shape)::

    gpus:                          # in index order
      - name: NVIDIA A100-SXM4-80GB
        memoryMiB: 81920
        numaNode: 0
        uuid: GPU-...              # optional, derived from the profile name and index
        pciBusId: "0000:07:00.0"   # optional, derived from the index
        mig: [1g.10gb, 3g.40gb]    # optional MIG devices; the GPU is MIG-enabled when present
    nvswitch: false                # optional: true routes every NV<n> through NVSwitches
    topology:                      # optional pair tokens, "X" on the diagonal
      - [X, NV12+PIX]              # NVLinks and PCIe relation; nvidia-smi's one token also works
      - [NV12+PIX, X]
    events:                        # optional scripted faults, seconds after health checks start
      - {at: 5, gpu: 1, xid: 79}
      - {at: 6, gpu: 0, xid: 94, mig: 0}   # on the GPU's first MIG device
      - {at: 9, gpu: 1, lost: true}        # the GPU falls off the bus
      - {at: 20, gpu: 1, restore: true}    # and answers again

A pair token is ``NV<n>+<relation>``, ``NV<n>`` or ``<relation>``, the
relation one of ``BOARD PIX PXB PHB NODE SYS`` (see ``pair_score.py``). A bare
``NV<n>`` (nvidia-smi's one token) implies ``NODE`` for GPUs on one NUMA node
and ``SYS`` otherwise; so does a pair without ``topology`` (with no NVLink).
Every error names the file, the field path and the reason.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accel_plugins.backends.nvidia.allocation.pair_score import parse_link
from accel_plugins.util.configfields import Fields

_MIG_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb$")
_UUID_NAMESPACE = bytes.fromhex("6c1b1a9e8f1e4b8a9d6e3a3f4f0c2b71")


@dataclass(frozen=True, slots=True)
class SimMig:
    profile: str
    gpu_slices: int
    compute_slices: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class SimGpu:
    name: str
    memory_mib: int
    numa_node: int | None
    uuid: str
    pci_bus_id: str
    mig: tuple[SimMig, ...] = ()
    mig_enabled: bool = False


@dataclass(frozen=True, slots=True)
class SimEvent:
    at: float
    gpu: int
    xid: int | None = None
    mig: int | None = None
    lost: bool = False
    restore: bool = False


@dataclass(frozen=True, slots=True)
class NodeProfile:
    name: str
    gpus: tuple[SimGpu, ...]
    topology: tuple[tuple[str, ...], ...]
    nvswitch: bool = False
    events: tuple[SimEvent, ...] = ()


def nv_links(token: str) -> int:
    """``NV12`` or ``NV12+PIX`` -> 12; any other token -> 0."""
    link = parse_link(token)
    return 0 if link is None else link.nvlinks


def parse_mig_profile(text: str) -> SimMig | None:
    """``3g.40gb`` or ``1c.3g.40gb`` -> slices and memory; None when malformed."""
    match = _MIG_PROFILE.match(text)
    if match is None:
        return None
    compute, gpu, gb = match.groups()
    gpu_slices = int(gpu)
    return SimMig(
        profile=text,
        gpu_slices=gpu_slices,
        compute_slices=int(compute) if compute else gpu_slices,
        memory_mib=int(gb) * 1024,
    )


def gpu_uuid(profile: str, index: int) -> str:
    return f"GPU-{_uuid5(f'{profile}/{index}')}"


def mig_uuid(gpu: str, slot: int) -> str:
    return f"MIG-{_uuid5(f'{gpu}/mig/{slot}')}"


def _uuid5(name: str) -> str:
    """RFC 4122's name-based UUID (SHA-1) in our namespace, the text ``uuid.uuid5`` gives;
    written out because the uuid module loads ``platform`` and its regexes (issue 34)."""
    digest = bytearray(
        hashlib.sha1(_UUID_NAMESPACE + name.encode(), usedforsecurity=False).digest()[:16]
    )
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    text = digest.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def default_bus_id(index: int) -> str:
    # 32 buses per PCI domain keep the number two hex digits (a valid address) at any index.
    domain, slot = divmod(index, 32)
    return f"{domain:04x}:{0x07 + slot * 8:02x}:00.0"


def _seconds(r: Fields, value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise r.fail(field, f"expected a number of seconds >= 0, got {value!r}")
    return float(value)


def parse_profile(data: object, *, name: str, source: str) -> NodeProfile:
    """Validate a profile document and fill in derived UUIDs, bus IDs and topology."""
    r = Fields(source)
    top = r.mapping(data, "", {"gpus", "topology", "nvswitch", "events"})
    raw_gpus = r.sequence(top.get("gpus"), "gpus")
    if not raw_gpus:
        raise r.fail("gpus", "a node needs at least one GPU")
    gpus = tuple(_parse_gpu(r, item, i, name) for i, item in enumerate(raw_gpus))
    _unique(r, [g.uuid for g in gpus], "uuid")
    _unique(r, [g.pci_bus_id for g in gpus], "pciBusId")
    nvswitch = r.boolean(top.get("nvswitch", False), "nvswitch")
    if "topology" in top:
        topology = _parse_topology(r, top["topology"], len(gpus))
    else:
        topology = _default_topology(gpus)
    if nvswitch:
        counts = {
            nv_links(t) for i, row in enumerate(topology) for j, t in enumerate(row) if i != j
        }
        if len(counts) != 1 or 0 in counts:
            raise r.fail("nvswitch", "NVSwitch nodes need the same NV<n> between every GPU pair")
    events = tuple(
        _parse_event(r, item, f"events[{i}]", gpus)
        for i, item in enumerate(r.sequence(top.get("events", []), "events"))
    )
    return NodeProfile(
        name=name,
        gpus=gpus,
        topology=topology,
        nvswitch=nvswitch,
        events=tuple(sorted(events, key=lambda e: e.at)),
    )


def _parse_gpu(r: Fields, item: object, index: int, profile: str) -> SimGpu:
    field = f"gpus[{index}]"
    data = r.mapping(item, field, {"name", "memoryMiB", "numaNode", "uuid", "pciBusId", "mig"})
    numa = data.get("numaNode")
    migs: list[SimMig] = []
    if "mig" in data:
        for slot, text in enumerate(r.sequence(data["mig"], f"{field}.mig")):
            where = f"{field}.mig[{slot}]"
            parsed = parse_mig_profile(r.string(text, where, empty=False))
            if parsed is None:
                raise r.fail(where, f"{text!r} is not a MIG profile like 1g.10gb or 1c.3g.40gb")
            migs.append(parsed)
    gpu_id = r.string(data.get("uuid", gpu_uuid(profile, index)), f"{field}.uuid", empty=False)
    if not gpu_id.startswith("GPU-"):
        raise r.fail(f"{field}.uuid", f"GPU UUIDs start with 'GPU-', got {gpu_id!r}")
    bus = r.string(data.get("pciBusId", default_bus_id(index)), f"{field}.pciBusId", empty=False)
    if not re.match(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", bus):
        raise r.fail(f"{field}.pciBusId", f"{bus!r} is not a PCI address like 0000:07:00.0")
    return SimGpu(
        name=r.string(data.get("name"), f"{field}.name", empty=False),
        memory_mib=r.integer(data.get("memoryMiB"), f"{field}.memoryMiB", minimum=1),
        numa_node=None if numa is None else r.integer(numa, f"{field}.numaNode", minimum=0),
        uuid=gpu_id,
        pci_bus_id=_short_bus(bus),
        mig=tuple(migs),
        mig_enabled="mig" in data,
    )


def _short_bus(bus: str) -> str:
    domain, rest = bus.lower().split(":", 1)
    return f"{int(domain, 16):04x}:{rest}"


def _unique(r: Fields, values: list[str], key: str) -> None:
    seen: dict[str, int] = {}
    for i, value in enumerate(values):
        if value in seen:
            raise r.fail(f"gpus[{i}].{key}", f"{value!r} repeats gpus[{seen[value]}].{key}")
        seen[value] = i


def _parse_topology(r: Fields, value: object, count: int) -> tuple[tuple[str, ...], ...]:
    rows = r.sequence(value, "topology")
    if len(rows) != count:
        raise r.fail("topology", f"expected {count} rows (one per GPU), got {len(rows)}")
    matrix: list[tuple[str, ...]] = []
    for i, row in enumerate(rows):
        cells = r.sequence(row, f"topology[{i}]")
        if len(cells) != count:
            raise r.fail(f"topology[{i}]", f"expected {count} entries, got {len(cells)}")
        tokens: list[str] = []
        for j, cell in enumerate(cells):
            where = f"topology[{i}][{j}]"
            token = r.string(cell, where, empty=False)
            if token != "X" and (token == "?" or parse_link(token) is None):
                raise r.fail(
                    where,
                    f"{token!r} is not X or a pair token: NV<n>, <relation> or "
                    "NV<n>+<relation>, relation one of BOARD, PIX, PXB, PHB, NODE, SYS",
                )
            if (token == "X") != (i == j):
                raise r.fail(where, "'X' belongs on the diagonal and only there")
            tokens.append(token)
        matrix.append(tuple(tokens))
    for i in range(count):
        for j in range(i):
            if matrix[i][j] != matrix[j][i]:
                raise r.fail(
                    f"topology[{i}][{j}]",
                    f"{matrix[i][j]!r} differs from topology[{j}][{i}] = {matrix[j][i]!r}",
                )
    return tuple(matrix)


def _default_topology(gpus: Sequence[SimGpu]) -> tuple[tuple[str, ...], ...]:
    def token(a: SimGpu, b: SimGpu) -> str:
        return "NODE" if a.numa_node is not None and a.numa_node == b.numa_node else "SYS"

    return tuple(
        tuple("X" if i == j else token(a, b) for j, b in enumerate(gpus))
        for i, a in enumerate(gpus)
    )


def _parse_event(r: Fields, item: object, field: str, gpus: Sequence[SimGpu]) -> SimEvent:
    data = r.mapping(item, field, {"at", "gpu", "xid", "mig", "lost", "restore"})
    gpu = r.integer(data.get("gpu"), f"{field}.gpu", minimum=0)
    if gpu >= len(gpus):
        raise r.fail(f"{field}.gpu", f"no GPU {gpu}; the node has {len(gpus)}")
    lost = r.boolean(data.get("lost", False), f"{field}.lost")
    restore = r.boolean(data.get("restore", False), f"{field}.restore")
    xid = None if "xid" not in data else r.integer(data["xid"], f"{field}.xid", minimum=1)
    if (xid is not None) + lost + restore != 1:
        raise r.fail(field, "give exactly one of xid, lost: true or restore: true")
    mig = None if "mig" not in data else r.integer(data["mig"], f"{field}.mig", minimum=0)
    if mig is not None and mig >= len(gpus[gpu].mig):
        raise r.fail(f"{field}.mig", f"GPU {gpu} has {len(gpus[gpu].mig)} MIG devices")
    return SimEvent(
        at=_seconds(r, data.get("at"), f"{field}.at"),
        gpu=gpu,
        xid=xid,
        mig=mig,
        lost=lost,
        restore=restore,
    )


def load_profile_file(path: Path) -> NodeProfile:
    """Read a YAML profile, naming the file in every error."""
    from accel_plugins.util import yamlfile  # PyYAML only for a profile file, not a built-in one

    return parse_profile(yamlfile.load(path, "simulated node"), name=path.stem, source=str(path))
