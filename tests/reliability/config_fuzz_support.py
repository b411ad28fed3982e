"""Hypothesis strategies for random configuration documents.

Three kinds of input reach a parser: arbitrary bytes (not even UTF-8),
arbitrary YAML text, and documents close to a valid one. The last kind finds
the deep checks: a valid base document with one to three leaves replaced by
random values, keys deleted, or unknown keys added.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import yaml
from hypothesis import strategies as st

# Strings that tend to break parsers: paths, globs, IDs, YAML look-alikes.
TRICKY_TEXT = [
    "",
    " ",
    "/",
    "/dev/",
    "/dev/*",
    "/dev/../etc",
    "dev/x",
    "[",
    "all",
    "none",
    "mixed",
    "v1",
    "v2",
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.5gb",
    "0:1",
    "GPU-00000000-0000-0000-0000-000000000000",
    "1a86",
    "0x",
    "NV12",
    "X",
    "SYS",
    "1g.10gb",
    "0g.0gb",
    "9999g.1gb",
    "\x00",
    "ü",
    "~",
    "null",
    "1e400",
]

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(TRICKY_TEXT),
    _text,
)


def values(keys: list[str]) -> st.SearchStrategy[Any]:
    """Any YAML value, with mapping keys mostly from the format's own vocabulary."""
    key = st.one_of(st.sampled_from(keys), _text)
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(key, inner, max_size=4)
        ),
        max_leaves=12,
    )


def _slots(doc: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key or index) for every value inside ``doc``."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield doc, k
            yield from _slots(v)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield doc, i
            yield from _slots(v)


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """``base`` with one to three random edits."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        slots = list(_slots(doc))
        if not slots:
            break
        container, slot = draw(st.sampled_from(slots))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            container[slot] = draw(values(keys))
        elif action == "delete":
            del container[slot]
        elif isinstance(container, dict):
            container[draw(st.one_of(st.sampled_from(keys), _text))] = draw(values(keys))
        else:
            container.append(draw(values(keys)))
    return doc


def dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


def documents(base: dict[str, Any], keys: list[str]) -> st.SearchStrategy[bytes]:
    """File contents: near-valid YAML, random YAML, random text, random bytes."""
    return st.one_of(
        mutated(base, keys).map(lambda d: dump(d).encode()),
        values(keys).map(lambda d: dump(d).encode()),
        _text.map(str.encode),
        st.binary(max_size=64),
    )
