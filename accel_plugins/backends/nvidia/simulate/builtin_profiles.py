"""Built-in simulated nodes, written in the same shape as a ``--simulate`` YAML file."""

from __future__ import annotations

from pathlib import Path

from accel_plugins.backends.nvidia.simulate.simulated_profile import (
    NodeProfile,
    load_profile_file,
    parse_profile,
)
from accel_plugins.errors import ConfigError


def _matrix(count: int, token: object) -> list[list[str]]:
    """A full matrix where ``token(i, j)`` names the link between GPUs i and j."""
    pick = token if callable(token) else (lambda i, j: token)
    return [["X" if i == j else str(pick(i, j)) for j in range(count)] for i in range(count)]


def _gpus(name: str, memory: int, buses: list[str], numa: list[int]) -> list[dict[str, object]]:
    return [
        {"name": name, "memoryMiB": memory, "pciBusId": bus, "numaNode": node}
        for bus, node in zip(buses, numa, strict=True)
    ]


def _pairs(i: int, j: int) -> str:
    # NVLink bridge inside a pair, one PCIe switch per pair of pairs, two NUMA nodes.
    if i // 2 == j // 2:
        return "NV12+PIX"
    return "PIX" if i // 4 == j // 4 else "SYS"


def _four(i: int, j: int) -> str:
    return "PHB" if i // 2 == j // 2 else "SYS"


_HALVES = [0, 0, 0, 0, 1, 1, 1, 1]

BUILTIN: dict[str, dict[str, object]] = {
    # 8 SXM4 A100s, every pair NV12 through six NVSwitches (no direct GPU-to-GPU link).
    "dgx-a100": {
        "gpus": _gpus(
            "NVIDIA A100-SXM4-80GB",
            81920,
            [f"0000:{b}:00.0" for b in ("07", "0f", "47", "4e", "87", "90", "b7", "bd")],
            _HALVES,
        ),
        "nvswitch": True,
        "topology": _matrix(8, "NV12"),
    },
    # 8 SXM5 H100s, every pair NV18 through four NVSwitches (no direct GPU-to-GPU link).
    "dgx-h100": {
        "gpus": _gpus(
            "NVIDIA H100 80GB HBM3",
            81559,
            [f"0000:{b}:00.0" for b in ("1b", "43", "52", "61", "9d", "c3", "d1", "df")],
            _HALVES,
        ),
        "nvswitch": True,
        "topology": _matrix(8, "NV18"),
    },
    "pcie-8gpu-nvlink-pairs": {
        "gpus": _gpus(
            "NVIDIA H100 NVL",
            95830,
            [f"0000:{b}:00.0" for b in ("17", "18", "31", "32", "97", "98", "b1", "b2")],
            _HALVES,
        ),
        "topology": _matrix(8, _pairs),
    },
    "pcie-4gpu": {
        "gpus": _gpus(
            "NVIDIA L40S",
            46068,
            [f"0000:{b}:00.0" for b in ("21", "41", "a1", "c1")],
            [0, 0, 1, 1],
        ),
        "topology": _matrix(4, _four),
    },
    # HGX A100 4-GPU board: direct NVLink (4 links per pair), MIG on three GPUs; the
    # bare NV4 takes its PCIe relation from the NUMA nodes (NODE or SYS).
    "a100-mig": {
        "gpus": [
            {
                "name": "NVIDIA A100-SXM4-40GB",
                "memoryMiB": 40960,
                "pciBusId": f"0000:{b}:00.0",
                "numaNode": i // 2,
                **({"mig": m} if m is not None else {}),
            }
            for i, (b, m) in enumerate(
                [
                    ("07", ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]),
                    ("0f", ["1g.5gb"] * 7),
                    ("47", ["7g.40gb"]),
                    ("4e", None),
                ]
            )
        ],
        "topology": _matrix(4, "NV4"),
    },
}


def names() -> list[str]:
    return sorted(BUILTIN)


def load_profile(name_or_file: str) -> NodeProfile:
    """A built-in profile by name, else a YAML file by path."""
    if name_or_file in BUILTIN:
        return parse_profile(
            BUILTIN[name_or_file], name=name_or_file, source=f"built-in profile {name_or_file}"
        )
    path = Path(name_or_file)
    if not path.exists():
        raise ConfigError(
            "--simulate",
            "",
            f"{name_or_file!r} is neither a built-in profile ({', '.join(names())}) "
            "nor an existing file",
        )
    return load_profile_file(path)
