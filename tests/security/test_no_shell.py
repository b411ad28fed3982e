"""Nothing from a config file (or anywhere) reaches a shell, an interpreter or an unsafe loader.

An AST check over every module of the package (generated stubs aside): no
subprocess or os.system-style process spawning, no shell=True, no eval/exec,
no pickle, and YAML only through safe loaders. The check is tested against
snippets of each forbidden form, so it cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "accel_plugins"

FORBIDDEN_MODULES = {"subprocess", "pty", "pickle", "marshal", "shelve", "commands", "popen2"}
FORBIDDEN_OS = {"system", "popen", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv"}
FORBIDDEN_OS |= {"spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "startfile"}
FORBIDDEN_OS |= {"execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe"}
FORBIDDEN_ASYNCIO = {"create_subprocess_exec", "create_subprocess_shell"}
FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "__import__"}
UNSAFE_YAML = {"unsafe_load", "unsafe_load_all", "full_load", "full_load_all", "load_all"}
# yaml.load(..., Loader=X) is fine when X is one of these or a class derived from one.
SAFE_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}


def _name(node: ast.expr) -> str:
    """`os.system` -> "os.system"; anything else -> ""."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _name(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _safe_loader_classes(tree: ast.Module) -> set[str]:
    """Classes in the module derived (directly) from a safe YAML loader."""
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(_name(base).rsplit(".", 1)[-1] in SAFE_LOADERS for base in node.bases)
    }


def problems(source: str) -> Iterator[str]:
    """Every forbidden use in ``source``, as 'line N: what'."""
    tree = ast.parse(source)
    safe = SAFE_LOADERS | _safe_loader_classes(tree)
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    yield f"{where}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[0] in FORBIDDEN_MODULES:
                yield f"{where}: from {module} import ..."
            if module == "os" and {a.name for a in node.names} & FORBIDDEN_OS:
                yield f"{where}: from os import a process spawner"
        elif isinstance(node, ast.Call):
            called = _name(node.func)
            if called.startswith("asyncio.") and called[8:] in FORBIDDEN_ASYNCIO:
                yield f"{where}: {called}()"
            if called.startswith("os.") and called[3:] in FORBIDDEN_OS:
                yield f"{where}: {called}()"
            if called.removeprefix("builtins.") in FORBIDDEN_BUILTINS:
                yield f"{where}: {called}()"
            if called.startswith("yaml.") and called[5:] in UNSAFE_YAML:
                yield f"{where}: {called}()"
            if called == "yaml.load":
                loaders = [k.value for k in node.keywords if k.arg == "Loader"] + node.args[1:2]
                if not loaders or _name(loaders[0]).rsplit(".", 1)[-1] not in safe:
                    yield f"{where}: yaml.load() without a safe Loader"
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                ):
                    yield f"{where}: shell= in a call"


# The one module allowed to compile and unmarshal code: accel_plugins.util.codecache, the
# bytecode cache of the methods @dataclass generates. What it compiles is the text the
# dataclasses module wrote for our own classes (never input), and what it unmarshals is
# read from the package's own __pycache__, the trust .pyc files already have.
# Three modules start programs, always from an argv list, never through a shell: the MPS
# control daemon's side runs NVIDIA's nvidia-cuda-mps-control (--mps-control-path), as
# NVIDIA's plugin does; the conformance kit (a test tool, never part of a node's plugin)
# starts the driver under test from the operator's argv and, without a kubeconfig, etcd
# and kube-apiserver from $KUBEBUILDER_ASSETS.
ALLOWED = {
    "accel_plugins/util/codecache.py": {"import marshal", "compile()", "builtins.exec()"},
    "accel_plugins/backends/nvidia/mps/mps_control.py": {"asyncio.create_subprocess_exec()"},
    "accel_plugins/conformance/driver_process.py": {"asyncio.create_subprocess_exec()"},
    "accel_plugins/conformance/envtest.py": {"import subprocess"},
}


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "api" not in p.relative_to(PACKAGE).parts)


def test_the_package_spawns_no_shell_and_loads_nothing_unsafely() -> None:
    found = {
        str(path.relative_to(PACKAGE.parent)): list(problems(path.read_text()))
        for path in package_modules()
    }
    for path, allowed in ALLOWED.items():
        assert {issue.split(": ", 1)[1] for issue in found[path]} == allowed, path
        found[path] = []
    assert {path: issues for path, issues in found.items() if issues} == {}
    assert len(found) > 50, "the check looked at the package"


@pytest.mark.parametrize(
    "snippet",
    [
        pytest.param("import subprocess", id="import-subprocess"),
        pytest.param("from subprocess import run", id="from-subprocess"),
        pytest.param("import pickle", id="pickle"),
        pytest.param("import os\nos.system(cmd)", id="os-system"),
        pytest.param("import os\nos.popen(cmd)", id="os-popen"),
        pytest.param("import os\nos.execvp(cmd, [cmd])", id="os-exec"),
        pytest.param("from os import posix_spawn", id="from-os-spawn"),
        pytest.param("run(cmd, shell=True)", id="shell-true"),
        pytest.param("run(cmd, shell=flag)", id="shell-from-a-variable"),
        pytest.param("import asyncio\nasyncio.create_subprocess_exec(cmd)", id="asyncio-exec"),
        pytest.param("eval(text)", id="eval"),
        pytest.param("exec(text)", id="exec"),
        pytest.param("import builtins\nbuiltins.exec(text)", id="builtins-exec"),
        pytest.param("import yaml\nyaml.load(text)", id="yaml-load-default-loader"),
        pytest.param("import yaml\nyaml.load(text, Loader=yaml.Loader)", id="yaml-full-loader"),
        pytest.param("import yaml\nyaml.unsafe_load(text)", id="yaml-unsafe-load"),
        pytest.param("import yaml\nyaml.full_load(text)", id="yaml-full-load"),
    ],
)
def test_the_check_finds_each_forbidden_form(snippet: str) -> None:
    assert list(problems(snippet))


@pytest.mark.parametrize(
    "snippet",
    [
        pytest.param("import yaml\nyaml.safe_load(text)", id="safe-load"),
        pytest.param("import yaml\nyaml.load(text, Loader=yaml.SafeLoader)", id="safe-loader"),
        pytest.param(
            "import yaml\nclass Strict(yaml.SafeLoader): pass\nyaml.load(text, Loader=Strict)",
            id="derived-safe-loader",
        ),
        pytest.param("run(cmd, shell=False)", id="shell-false"),
        pytest.param("import os\nos.fspath(p)", id="harmless-os"),
    ],
)
def test_the_check_allows_safe_forms(snippet: str) -> None:
    assert list(problems(snippet)) == []
