"""The dataclass code cache (``accel_plugins.util.codecache``): same classes, compiled once.

Each test builds classes through a :class:`CodeCache` on a temp directory by
calling ``dataclasses.dataclass`` with the cache installed, and checks that the
class behaves as one built without it, what is read and written, and that
every broken or forbidden file path falls back to plain compilation.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accel_plugins.util import codecache
from accel_plugins.util.codecache import CodeCache

MODULE = "tests.unit.codecache_sample"


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "dataclass-code"


@pytest.fixture(autouse=True)
def bytecode_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a host without PYTHONDONTWRITEBYTECODE (CI and the bench set it)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


@pytest.fixture
def installed(cache_dir: Path) -> Iterator[CodeCache]:
    codecache.uninstall()
    cache = codecache.install(cache_dir)
    yield cache
    codecache.uninstall()


def build_sample() -> type[Any]:
    """A frozen, slotted dataclass with defaults, built as if in module ``MODULE``."""
    namespace: dict[str, Any] = {"__name__": MODULE, "dataclasses": dataclasses}
    sys.modules[MODULE] = type(sys)(MODULE)
    sys.modules[MODULE].__dict__.update(namespace)
    try:
        exec(
            "@dataclasses.dataclass(frozen=True, slots=True)\n"
            "class Sample:\n"
            "    name: str\n"
            "    count: int = 0\n"
            "    tags: tuple[str, ...] = ()\n",
            sys.modules[MODULE].__dict__,
        )
        sample: type[Any] = sys.modules[MODULE].__dict__["Sample"]
        return sample
    finally:
        del sys.modules[MODULE]


def behaviour(cls: type[Any]) -> tuple[object, ...]:
    a, b = cls("gpu", 2), cls("gpu", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.name = "x"
    return (
        repr(a),
        a == b,
        hash(a) == hash(b),
        a == cls("gpu"),
        [f.name for f in dataclasses.fields(a)],
    )


def test_a_class_built_through_the_cache_behaves_as_without_it(installed: CodeCache) -> None:
    cached = build_sample()
    codecache.uninstall()
    plain = build_sample()
    assert behaviour(cached) == behaviour(plain)
    assert dataclasses.replace(cached("a"), count=3) == cached("a", 3)


def test_a_second_process_reads_the_methods_instead_of_compiling(
    installed: CodeCache, cache_dir: Path
) -> None:
    build_sample()
    assert installed.dirty == {MODULE}
    assert installed.save() == 1
    assert (cache_dir / f"{MODULE}.bin").is_file()
    codecache.uninstall()

    again = codecache.install(cache_dir)
    cls = build_sample()
    assert again.dirty == set(), "every method came from the file"
    assert behaviour(cls)[0] == "Sample(name='gpu', count=2, tags=())"


def test_save_forgets_the_tables(installed: CodeCache) -> None:
    build_sample()
    installed.save()
    assert (installed.tables, installed.used, installed.dirty) == ({}, {}, set())


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00\x01\x02\x03not marshal", id="another-python"),
        pytest.param(codecache._MAGIC + b"\xff\xfe", id="truncated"),
        pytest.param(codecache._MAGIC + b"N", id="not-a-table"),
    ],
)
def test_an_unreadable_file_is_ignored(cache_dir: Path, content: bytes) -> None:
    cache_dir.mkdir(parents=True)
    (cache_dir / f"{MODULE}.bin").write_bytes(content)
    codecache.uninstall()
    cache = codecache.install(cache_dir)
    try:
        assert behaviour(build_sample())[1] is True
        assert cache.dirty == {MODULE}
    finally:
        codecache.uninstall()


def test_a_corrupt_entry_is_compiled_again(installed: CodeCache, cache_dir: Path) -> None:
    build_sample()
    installed.save()
    codecache.uninstall()
    cache = codecache.install(cache_dir)
    table = cache._table(MODULE)
    for key in table:
        table[key] = b"garbage"
    assert behaviour(build_sample())[1] is True
    assert cache.dirty == {MODULE}


def test_nothing_is_written_under_dont_write_bytecode_unless_forced(
    installed: CodeCache, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    build_sample()
    assert installed.save() == 0
    assert not cache_dir.exists()
    build_sample()
    assert installed.save(force=True) == 1


def test_an_unwritable_directory_is_skipped(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    codecache.uninstall()
    cache = codecache.install(blocker / "dataclass-code")
    try:
        build_sample()
        assert cache.save() == 0
    finally:
        codecache.uninstall()


def test_a_crowded_table_keeps_only_what_this_run_used(
    installed: CodeCache, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codecache, "MAX_ENTRIES", 2)
    table = installed._table(MODULE)
    stale = {bytes([i]) * 16: b"" for i in range(5)}
    table.update(stale)
    build_sample()
    installed.save()
    kept = codecache.CodeCache._load(cache_dir / f"{MODULE}.bin")
    assert kept
    assert not set(kept) & set(stale)


@pytest.mark.parametrize(
    ("source", "globals_"),
    [
        pytest.param(compile("x = 1", "<t>", "exec"), {"__name__": MODULE}, id="code-object"),
        pytest.param("x = 1", {}, id="no-module-name"),
        pytest.param("x = 1", None, id="no-globals"),
    ],
)
def test_other_exec_calls_pass_through_uncached(
    cache_dir: Path, source: Any, globals_: dict[str, Any] | None
) -> None:
    cache = CodeCache(cache_dir)
    namespace: dict[str, Any] = {}
    cache.exec(source, globals_, namespace)
    assert namespace == {"x": 1}
    assert cache.tables == {}


def test_install_shadows_exec_in_dataclasses_alone(cache_dir: Path) -> None:
    codecache.uninstall()
    cache = codecache.install(cache_dir)
    assert codecache.install(cache_dir / "other") is cache, "installed once per process"
    assert dataclasses.exec == cache.exec  # type: ignore[attr-defined]
    codecache.uninstall()
    assert not hasattr(dataclasses, "exec")
    assert codecache.save() == 0, "no cache installed: nothing to write"


def test_the_build_writes_a_file_per_module_with_dataclasses(tmp_path: Path) -> None:
    # In a fresh interpreter: the build imports every module of the package.
    target = tmp_path / "built"
    code = (
        "import pathlib, sys; from accel_plugins.util import codecache; "
        f"print(codecache.build(pathlib.Path({str(target)!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    files = {p.stem for p in target.glob("*.bin")}
    assert int(done.stdout) == len(files)
    assert {"accel_plugins.plugin.device", "accel_plugins.backends.nvidia.config.settings"} <= files
