"""The stubs' classes built on upb alone (``accel_plugins.api.loader``, issue 34) are the ones
protobuf's own builder makes: the same names in each ``_pb2`` module, the same classes and
descriptors, the same wire bytes; and protoc's code still runs where upb is not there.

Each side runs in a fresh interpreter (one descriptor pool holds a file once): the loader as
the stubs use it, then protoc's own code, chosen by turning the loader's switch off before
the stubs are imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support.repo import ROOT

MODULES = sorted(p.stem for p in (ROOT / "accel_plugins" / "api").glob("*_pb2.py"))

# Prints what a _pb2 module holds: every name protoc's builder sets, with what it is, and
# the wire bytes of a message per class with every scalar and repeated field set.
DESCRIBE = """
import importlib, json, sys
from accel_plugins.api import loader
loader.UPB = loader.UPB and sys.argv[1] == "loader"
from google.protobuf.descriptor import FieldDescriptor as F
VALUES = {F.TYPE_STRING: "x", F.TYPE_BOOL: True, F.TYPE_INT32: 1, F.TYPE_INT64: 2, F.TYPE_ENUM: 1}

def sample(cls):
    msg = cls()
    for field in cls.DESCRIPTOR.fields:
        kind = field.message_type
        if kind is not None and kind.GetOptions().map_entry:
            if kind.fields_by_name["value"].type == F.TYPE_STRING:
                getattr(msg, field.name)["k"] = "v"
        elif kind is None and field.type in VALUES:
            value = VALUES[field.type]
            if field.is_repeated:
                getattr(msg, field.name).append(value)
            else:
                setattr(msg, field.name, value)
    return msg.SerializeToString().hex()

def describe(value):
    if isinstance(value, type):
        nested = sorted(k for k, v in vars(value).items() if hasattr(v, "DESCRIPTOR"))
        full_name = value.DESCRIPTOR.full_name
        return ["class", value.__module__, value.__qualname__, full_name, nested, sample(value)]
    if hasattr(value, "full_name"):
        return [type(value).__name__, value.full_name]
    if isinstance(value, int):
        return ["int", value]
    return [type(value).__name__]

out = {}
for name in sys.argv[2:]:
    module = importlib.import_module(f"accel_plugins.api.{name}")
    builder_only = {"_globals", "_sym_db", "_builder", "_descriptor", "_descriptor_pool",
                    "_symbol_database", "_runtime_version", "_loader", "_SERIALIZED"}
    out[name] = {k: describe(v) for k, v in vars(module).items()
                 if not k.startswith("__") and k not in builder_only}
print(json.dumps(out, sort_keys=True))
"""


def describe(side: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", DESCRIBE, side, *MODULES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    described: dict[str, Any] = json.loads(done.stdout)
    return described


def test_the_stubs_use_the_loader_here() -> None:
    from accel_plugins.api import loader

    assert loader.UPB, "protobuf's upb extension is what the product is tested on"


def test_the_loader_builds_what_protobufs_builder_builds() -> None:
    ours, protocs = describe("loader"), describe("protoc")
    assert sorted(ours) == MODULES
    for module in MODULES:
        assert ours[module] == protocs[module], module
    classes = sum(1 for m in ours.values() for v in m.values() if v[0] == "class")
    assert classes >= 40  # every message of the seven files, nested map entries included


def test_nested_classes_are_among_what_is_compared() -> None:
    """A loader that left out nested (map entry) classes fails the comparison above
    (tried: it does); that needs messages with nested classes to compare."""
    ours = describe("loader")
    nested = [v for m in ours.values() for v in m.values() if v[0] == "class" and v[4]]
    assert nested, "some messages have nested (map entry) classes to compare"


@pytest.mark.parametrize("implementation", ["python", "upb"])
def test_protocs_code_runs_where_upb_is_not_the_implementation(implementation: str) -> None:
    ours = describe("loader", {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": implementation})
    protocs = describe("protoc")
    for module in MODULES:
        assert {k: v[:4] for k, v in ours[module].items()} == {
            k: v[:4] for k, v in protocs[module].items()
        }
