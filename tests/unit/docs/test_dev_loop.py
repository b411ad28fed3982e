"""The development loop runs what CI runs: one list of static checks, three callers.

``hack/static-checks`` holds the checks; ``.ci/run``, ``noxfile.py`` and
``.pre-commit-config.yaml`` each call it by check name, so a check added there reaches
all three. CONTRIBUTING.md and docs/testing.md point a newcomer at the same commands.
"""

from __future__ import annotations

import ast
import re
import subprocess

import yaml

from tests.support.repo import ROOT as REPO_ROOT

STATIC_CHECKS = REPO_ROOT / "hack" / "static-checks"
CHECK_NAMES = ("lint", "chart", "docs")


def defined_checks() -> set[str]:
    return set(re.findall(r"^(\w+)\(\) \{$", STATIC_CHECKS.read_text(), re.MULTILINE))


def test_the_script_defines_exactly_the_named_checks() -> None:
    assert defined_checks() == set(CHECK_NAMES)


def test_ci_runs_every_check() -> None:
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert f"\nhack/static-checks {' '.join(CHECK_NAMES)}\n" in ci


def test_every_check_is_a_nox_session_and_tests_is_one_too() -> None:
    tree = ast.parse((REPO_ROOT / "noxfile.py").read_text())
    sessions = {
        node.name: ast.unparse(node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(ast.unparse(d) == "nox.session" for d in node.decorator_list)
    }
    assert set(sessions) == {*CHECK_NAMES, "tests"}
    for name in CHECK_NAMES:
        assert f"'hack/static-checks', '{name}'" in sessions[name]
    assert "'pytest'" in sessions["tests"]


def test_every_check_is_a_pre_commit_hook() -> None:
    config = yaml.safe_load((REPO_ROOT / ".pre-commit-config.yaml").read_text())
    entries = {hook["id"]: hook["entry"] for repo in config["repos"] for hook in repo["hooks"]}
    assert entries == {name: f"hack/static-checks {name}" for name in CHECK_NAMES}


def test_an_unknown_check_fails_naming_it() -> None:
    result = subprocess.run(
        [str(STATIC_CHECKS), "lnit"], capture_output=True, text=True, timeout=30, cwd=REPO_ROOT
    )
    assert result.returncode == 2
    assert "unknown check 'lnit'" in result.stderr


def test_contributing_names_the_loop() -> None:
    guide = (REPO_ROOT / "CONTRIBUTING.md").read_text()
    for command in ("nox -s lint tests", "pre-commit install", "docs/testing.md"):
        assert command in guide
