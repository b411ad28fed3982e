"""docs/package-layout.md is the tree, and the import contracts catch what they claim to.

Every package of ``accel_plugins`` is in the page's table and opens with a docstring that
says what it may import; every path in the table exists; no module outside ``api/`` passes
500 lines. The contracts are run on a copy of the tree with one import that breaks a layer
added on purpose: lint-imports must fail naming it (a checker proves itself by failing).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import ROOT as REPO_ROOT

PACKAGE = REPO_ROOT / "accel_plugins"
PAGE = REPO_ROOT / "docs" / "package-layout.md"
MAX_LINES = 500


def packages() -> list[str]:
    found = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        relative = init.parent.relative_to(PACKAGE)
        if relative.parts and relative.parts[0] != "api" and "__pycache__" not in relative.parts:
            found.append(f"{relative.as_posix()}/")
    return found


def table_paths() -> set[str]:
    section = PAGE.read_text().split("## The packages", 1)[1].split("\n## ", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", section, re.MULTILINE)}


@pytest.mark.parametrize("package", packages())
def test_every_package_is_on_the_page(package: str) -> None:
    assert package in table_paths(), f"docs/package-layout.md lists no {package}"


def test_every_path_on_the_page_exists() -> None:
    missing = [p for p in sorted(table_paths()) if not (PACKAGE / p.rstrip("/")).exists()]
    assert not missing, f"docs/package-layout.md lists paths that are gone: {missing}"


@pytest.mark.parametrize("package", packages())
def test_every_package_says_what_it_owns_and_may_import(package: str) -> None:
    docstring = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
    assert docstring, f"{package}__init__.py has no docstring"
    if package.count("/") == 1 and package not in ("backends/",):  # the top-level packages
        assert re.search(r"import|imports", docstring), f"{package}: say what it may import"


def test_no_module_outside_the_generated_stubs_passes_the_line_cap() -> None:
    long = {
        str(path.relative_to(REPO_ROOT)): n
        for path in PACKAGE.rglob("*.py")
        if "api" not in path.relative_to(PACKAGE).parts[:1]
        and (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_few_loose_modules_at_the_top() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "errors.py", "launch.py"]


LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")


# (the module that gets the wrong import, what it imports, the contract that must break)
WRONG_IMPORTS = {
    "runtime imports a mode": ("runtime/server.py", "accel_plugins.deviceplugin.manager", "Layers"),
    "DRA imports device-plugin mode": (
        "dra/model.py",
        "accel_plugins.deviceplugin.manager",
        "two modes are independent",
    ),
    "a backend imports the runtime": (
        "backends/generic/discovery.py",
        "accel_plugins.runtime.server",
        "Backends import only",
    ),
    "the product imports the emulator": (
        "metrics/server.py",
        "accel_plugins.kubelet_emulator.client",
        "never imports the kubelet",
    ),
}


@pytest.mark.skipif(not Path(LINT_IMPORTS).exists(), reason="import-linter is not installed")
@pytest.mark.parametrize(
    ("module", "bad_import", "contract"), WRONG_IMPORTS.values(), ids=WRONG_IMPORTS.keys()
)
def test_the_contracts_catch_a_wrong_import(
    tmp_path: Path, module: str, bad_import: str, contract: str
) -> None:
    copy = tmp_path / "tree"
    shutil.copytree(PACKAGE, copy / "accel_plugins", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", copy / "pyproject.toml")
    target = copy / "accel_plugins" / module
    target.write_text(target.read_text() + f"\nimport {bad_import}  # on purpose\n")
    env = {**os.environ, "PYTHONPATH": str(copy), "COLUMNS": "400"}  # one line per contract
    result = subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=copy, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode != 0, result.stdout
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), result.stdout
