"""A bytecode cache for the methods that ``@dataclass`` generates at import time.

``dataclasses`` writes each class's ``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__`` and ``__delattr__`` as source text and compiles it
with ``exec``, every time the class statement runs: about 0.6 ms a class on
Python 3.11, some 30 ms of a plugin's start-up for the 45 classes on its path,
where loading the modules that hold them costs a fraction of that (their own
bytecode comes from ``__pycache__``). This module gives those generated methods
what ``.pyc`` files give modules: :func:`install` puts a caching ``exec`` in the
``dataclasses`` module's namespace (a module global shadows the builtin for that
module alone), which finds the compiled code for a source text in a file per
calling module beside the package's ``.pyc`` files, or compiles and remembers
it; :func:`save` writes what was compiled. The key is a 128-bit BLAKE2 digest
of the source text, so an entry is never stale: a changed class generates other
text and misses.

The files are written where bytecode is: never under ``PYTHONDONTWRITEBYTECODE``
(which the image sets), except by ``python -m accel_plugins.util.codecache``, which the
image build runs after ``compileall``. A file that is missing, from another
Python, or unreadable is ignored; one that cannot be written is skipped, as pyc
files are. Only the console script (:mod:`accel_plugins.launch`) installs it.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import marshal
import os
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import CodeType
from typing import Any

try:  # the hash alone, without hashlib's OpenSSL
    from _blake2 import blake2b
except ImportError:  # pragma: no cover (a CPython built without it)
    from hashlib import blake2b

DIR_NAME = f"dataclass-code.{sys.implementation.cache_tag}"
# Entries kept per module at most; a checkout that changes often drops old texts instead.
MAX_ENTRIES = 256
_MAGIC = MAGIC_NUMBER


def default_path() -> Path:
    """``accel_plugins/__pycache__/dataclass-code.<tag>/``, beside the package's bytecode."""
    return Path(__file__).resolve().parent / "__pycache__" / DIR_NAME


class CodeCache:
    """Compiled code by module and source text, in one file per module under ``path``.

    A module's file (its classes' code objects, marshalled) is read when that module
    first builds a dataclass, so a start pays only for the modules it imports;
    :meth:`save` writes what was compiled and lets go of the tables.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tables: dict[str, dict[bytes, object]] = {}
        self.used: dict[str, set[bytes]] = {}
        self.dirty: set[str] = set()

    def _table(self, module: str) -> dict[bytes, object]:
        table = self.tables.get(module)
        if table is None:
            table = self.tables[module] = self._load(self.path / f"{module}.bin")
        return table

    @staticmethod
    def _load(file: Path) -> dict[bytes, object]:
        try:
            data = file.read_bytes()
        except OSError:
            return {}
        if not data.startswith(_MAGIC):
            return {}
        try:
            table = marshal.loads(data[len(_MAGIC) :])
        except (EOFError, ValueError, TypeError):
            return {}
        return table if isinstance(table, dict) else {}

    def _code(self, module: str, source: str) -> CodeType:
        table = self._table(module)
        key = blake2b(source.encode(), digest_size=16).digest()
        self.used.setdefault(module, set()).add(key)
        found = table.get(key)
        if isinstance(found, CodeType):
            return found
        # The file name builtins.exec gives source text, so tracebacks read the same.
        code = compile(source, "<string>", "exec")
        table[key] = code
        self.dirty.add(module)
        return code

    def exec(
        self,
        source: Any,
        globals: dict[str, Any] | None = None,
        locals: Any = None,
        /,
    ) -> None:
        """``exec`` with the compilation of source text cached, per calling module."""
        module = globals.get("__name__") if globals is not None else None
        if type(source) is str and type(module) is str:
            source = self._code(module, source)
        builtins.exec(source, globals, locals)

    def save(self, *, force: bool = False) -> int:
        """Write the files of the modules that compiled something, then forget every table;
        the number of files written (none under ``PYTHONDONTWRITEBYTECODE`` without
        ``force``, nor where the directory is not writable)."""
        written = 0
        if force or not sys.dont_write_bytecode:
            for module in sorted(self.dirty):
                table = self.tables[module]
                if len(table) > MAX_ENTRIES:
                    used = self.used.get(module, set())
                    table = {k: v for k, v in table.items() if k in used}
                written += self._write(self.path / f"{module}.bin", table)
        self.tables, self.used, self.dirty = {}, {}, set()
        return written

    @staticmethod
    def _write(file: Path, table: dict[bytes, object]) -> bool:
        temp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            temp.write_bytes(_MAGIC + marshal.dumps(table))
            os.replace(temp, file)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()
            return False
        return True


_installed: CodeCache | None = None


def install(path: Path | None = None) -> CodeCache:
    """Route the ``dataclasses`` module's ``exec`` calls through a cache (once per process)."""
    global _installed
    if _installed is None:
        _installed = CodeCache(path or default_path())
        # A module global shadows the builtin for that module's code alone.
        dataclasses.exec = _installed.exec  # type: ignore[attr-defined]
    return _installed


def uninstall() -> None:
    global _installed
    if _installed is not None and getattr(dataclasses, "exec", None) == _installed.exec:
        del dataclasses.exec  # type: ignore[attr-defined]
    _installed = None


def save() -> int:
    """Write the installed cache's new entries (see :meth:`CodeCache.save`)."""
    return _installed.save() if _installed is not None else 0


def build(path: Path | None = None) -> int:
    """Import every module of the package with the cache installed and write its files,
    even under ``PYTHONDONTWRITEBYTECODE``; the number of files written."""
    import importlib
    import pkgutil

    import accel_plugins

    cache = install(path)
    for module in pkgutil.walk_packages(accel_plugins.__path__, "accel_plugins."):
        if module.name.endswith("__main__"):
            continue
        # A module whose optional library is not installed (pyudev in the NVIDIA image).
        with contextlib.suppress(ImportError):
            importlib.import_module(module.name)
    cache.dirty.update(cache.tables)  # rewritten even where nothing was compiled
    return cache.save(force=True)


if __name__ == "__main__":
    count = build()
    print(f"{default_path()}: {count} modules' dataclass methods")
