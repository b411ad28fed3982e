"""Runtime dependencies are pinned to ranges: a tested lower bound and the next major as a cap.

``pip install accel-plugins`` is the framework alone; each vendor library
comes with its backend's extra (``[nvidia]``, ``[generic]``, both in ``[all]``).
The lower bounds are the oldest releases the suite was run against (see the
comment in pyproject.toml); the installed versions, which CI tests, must sit
inside the ranges. Each part of the package imports only what its install
brings: the framework its base dependencies, a backend also its extra.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
PACKAGE = PYPROJECT.parent / "accel_plugins"

with PYPROJECT.open("rb") as _handle:
    PROJECT = tomllib.load(_handle)["project"]

# The extras that install a backend's library, and the package each one serves.
VENDOR_EXTRAS = {"nvidia": "backends/nvidia", "generic": "backends/generic"}
# Parts of the package that may import more than the base: the backends, the DRA
# driver's API side and the modules the kubelet emulator reads claims with (the [dra]
# extra; the emulator imports them only for pods with claims) and the pytest plugin.
# A folder, or one module (``.py``).
AREAS = {
    **VENDOR_EXTRAS,
    "dra": "dra/kube",
    # The API-server adapters: the client, Node Events about device health (both modes;
    # skipped, saying so, without lightkube), the cordon annotation's watch (only with
    # API access; the cordon file needs none) and the optional client those make.
    "kube": "kube",
    # The per-node switch's API side: the migrate command, and the DRA slices a device
    # plugin waits on (both need API access; the chart's switch runs the DRA image).
    "migrate": "switch/migrate.py",
    "switch_slices": "switch/slices.py",
    "claim_api": "kubelet_emulator/claim_api.py",
    # accel-plugins dra-conformance: claims and slices through the API server.
    "conformance": "conformance",
    "testing": "testing",
}
# Areas that install with another's extra.
EXTRA_OF = {
    "kube": "dra",
    "claim_api": "dra",
    "migrate": "dra",
    "switch_slices": "dra",
    "conformance": "dra",
}

# Top-level module -> the distribution that provides it.
PROVIDES = {
    "grpc": "grpcio",
    "google": "protobuf",
    "yaml": "pyyaml",
    "prometheus_client": "prometheus-client",
    "pyudev": "pyudev",
    "pynvml": "nvidia-ml-py",
    "pytest": "pytest",
    "pytest_asyncio": "pytest-asyncio",
    "lightkube": "lightkube",
    "httpx2": "httpx2",
}


def _requirements(lines: list[str]) -> list[Requirement]:
    return [Requirement(line) for line in lines]


def _names(requirements: list[Requirement]) -> set[str]:
    return {r.name.lower().replace("_", "-") for r in requirements}


BASE = _requirements(PROJECT["dependencies"])
EXTRAS = {name: _requirements(lines) for name, lines in PROJECT["optional-dependencies"].items()}
# What the plugin images run with: the base, the vendor extras and DRA's.
REQUIREMENTS = BASE + [r for extra in [*VENDOR_EXTRAS, "dra"] for r in EXTRAS[extra]]


@pytest.mark.parametrize("requirement", REQUIREMENTS, ids=[r.name for r in REQUIREMENTS])
def test_a_lower_and_an_upper_bound(requirement: Requirement) -> None:
    operators = {spec.operator for spec in requirement.specifier}
    assert operators == {">=", "<"}, f"{requirement}: want >=tested,<next-major"
    lower = next(Version(s.version) for s in requirement.specifier if s.operator == ">=")
    upper = next(Version(s.version) for s in requirement.specifier if s.operator == "<")
    # The cap is a major release above the floor: ranges, not pins, and not open-ended.
    assert upper.release[0] > lower.release[0] or (
        upper.release[0] == 0 == lower.release[0] and upper.release[1] > lower.release[1]
    )


@pytest.mark.parametrize("requirement", REQUIREMENTS, ids=[r.name for r in REQUIREMENTS])
def test_the_installed_version_is_in_range(requirement: Requirement) -> None:
    installed = version(requirement.name)
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"{requirement.name} {installed} is outside {requirement.specifier}"
    )


def test_the_base_is_the_framework_alone() -> None:
    """No vendor library in ``pip install accel-plugins``; each one in its extra."""
    assert _names(BASE) == {"grpcio", "protobuf", "pyyaml", "prometheus-client"}
    assert _names(EXTRAS["nvidia"]) == {"nvidia-ml-py"}
    assert _names(EXTRAS["generic"]) == {"pyudev"}


@pytest.mark.parametrize("extra", ["all", "dev"])
def test_all_and_dev_pull_every_backend(extra: str) -> None:
    """``[all]`` is both vendors and DRA; ``[dev]`` (what the tests install) includes ``[all]``."""
    wanted = {*VENDOR_EXTRAS, "dra"} if extra == "all" else {"all"}
    pulled = {name for r in EXTRAS[extra] if r.name == PROJECT["name"] for name in r.extras}
    assert pulled == wanted


@pytest.mark.parametrize("area", ["", *AREAS], ids=["framework", *AREAS])
def test_every_import_is_declared_where_it_is_used(area: str) -> None:
    """Each part imports only third-party modules its install brings (base, plus its extra)."""
    extra = EXTRA_OF.get(area, area)
    allowed = _names(BASE) | (_names(EXTRAS.get(extra, [])) if extra else set())
    imported = _third_party_imports(area)
    unknown = imported - set(PROVIDES)
    assert not unknown, f"no distribution known for {sorted(unknown)}: add it to PROVIDES"
    undeclared = {m for m in imported if PROVIDES[m] not in allowed}
    assert not undeclared, f"{area or 'framework'} imports {sorted(undeclared)}, not declared"


def _in(relative: str, where: str) -> bool:
    return relative == where if where.endswith(".py") else relative.startswith(where + "/")


def _in_area(path: Path, area: str) -> bool:
    relative = path.relative_to(PACKAGE).as_posix()
    if area:
        return _in(relative, AREAS[area])
    return not any(_in(relative, where) for where in AREAS.values())


def _third_party_imports(area: str) -> set[str]:
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if "api" in path.relative_to(PACKAGE).parts or not _in_area(path, area):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    # _typeshed exists for type checkers only (imported under TYPE_CHECKING).
    return {
        m
        for m in found
        if m not in sys.stdlib_module_names and m not in {"accel_plugins", "_typeshed"}
    }
