"""Reading YAML files for configuration: every failure is a ConfigError naming the file.

Shared by the generic config, the NVIDIA config and the simulated-node profiles,
so each reports unreadable files, non-UTF-8 bytes, syntax errors (with line and
column) and absurd nesting the same way instead of with a traceback.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from accel_plugins.errors import ConfigError


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of keeping the last one."""


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, Hashable):  # `? [a]`: a list or mapping as a key
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a plain value, got {key!r}", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def read_text(path: Path | str, what: str) -> str:
    """The file's text; ``what`` names it in the error (``cannot read <what>: ...``)."""
    source = str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read {what}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(source, "", f"not UTF-8 text: {exc}") from exc


def parse(
    text: str,
    source: str,
    *,
    strict: bool = False,
    invalid: str = "not valid YAML",
) -> Any:
    """The YAML document in ``text``; errors start with ``invalid`` and say where.

    ``strict`` refuses duplicate keys and non-scalar keys (:class:`StrictLoader`).
    """
    try:
        if strict:
            return yaml.load(text, Loader=StrictLoader)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"{invalid}: {reason(exc)}") from exc
    except RecursionError:
        # PyYAML composes recursively: thousands of nested brackets exhaust the stack.
        raise ConfigError(source, "", f"{invalid}: nested too deeply") from None


def load(path: Path | str, what: str) -> Any:
    """Read and parse one YAML file with the safe loader."""
    return parse(read_text(path, what), str(path))


def reason(exc: yaml.YAMLError) -> str:
    """``line L, column C: problem`` when PyYAML knows where, else its message."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
    return str(exc)
