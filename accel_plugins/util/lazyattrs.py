"""Package attributes that load their module on first use (PEP 562).

A package that is on every plugin's way to registration re-exports names
whose modules most plugins never need (the CDI writer, the metrics stack):
they are imported the first time someone reads the name, then kept.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: dict[str, Any], where: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` (its ``globals()``).

    ``where`` maps each lazy name to the module that defines it (absolute, or
    relative to the package with a leading dot).
    """
    name_of_package = str(package["__name__"])

    def load(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {name_of_package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, name_of_package), name)
        package[name] = value
        return value

    return load
