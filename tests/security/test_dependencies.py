"""Runtime dependencies are pinned to ranges: a tested lower bound and the next major as a cap.

The lower bounds are the oldest releases the suite was run against (see the
comment in pyproject.toml); the installed versions, which CI tests, must sit
inside the ranges.
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


def runtime_requirements() -> list[Requirement]:
    with PYPROJECT.open("rb") as handle:
        project = tomllib.load(handle)["project"]
    return [Requirement(line) for line in project["dependencies"]]


REQUIREMENTS = runtime_requirements()


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


def test_every_import_of_the_package_is_declared() -> None:
    """Third-party modules the package imports all come from a declared dependency."""
    declared = {r.name.lower().replace("_", "-") for r in REQUIREMENTS}
    provides = {
        "grpc": "grpcio",
        "google": "protobuf",
        "yaml": "pyyaml",
        "prometheus_client": "prometheus-client",
        "pyudev": "pyudev",
        "pynvml": "nvidia-ml-py",
    }
    assert set(provides.values()) == declared
    imported = _third_party_imports()
    assert imported <= set(provides), f"undeclared: {sorted(imported - set(provides))}"


def _third_party_imports() -> set[str]:
    package = PYPROJECT.parent / "accel_plugins"
    found: set[str] = set()
    for path in package.rglob("*.py"):
        if "api" in path.relative_to(package).parts:
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
