"""accel_plugins.util.configfields: typed reads whose failures name the source, field and reason."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from accel_plugins.errors import ConfigError
from accel_plugins.util.configfields import PLAIN, REPR, Fields, UnknownKeys, Wording, at

Read = Callable[[Fields], object]

GOOD: list[object] = [
    pytest.param(lambda f: f.mapping({"a": 1}, "x", ("a", "b")), {"a": 1}, id="mapping"),
    pytest.param(lambda f: f.mapping({"z": 1}, "x"), {"z": 1}, id="mapping-any-key"),
    pytest.param(lambda f: f.mapping(None, "x", optional=True), {}, id="mapping-optional-null"),
    pytest.param(lambda f: f.sequence([1, 2], "x"), [1, 2], id="list"),
    pytest.param(lambda f: f.sequence((1,), "x"), (1,), id="tuple"),
    pytest.param(lambda f: f.string("", "x"), "", id="string-empty-allowed"),
    pytest.param(lambda f: f.string("a", "x", empty=False), "a", id="string-non-empty"),
    pytest.param(lambda f: f.boolean(False, "x"), False, id="boolean"),
    pytest.param(lambda f: f.integer(0, "x", minimum=0, maximum=0), 0, id="integer-bounds"),
    pytest.param(lambda f: f.integer(-5, "x"), -5, id="integer-unbounded"),
    pytest.param(lambda f: f.choice("b", "x", ("a", "b")), "b", id="choice"),
    pytest.param(lambda f: f.optional({}, "k", "x", f.boolean), None, id="optional-absent"),
    pytest.param(lambda f: f.optional({"k": None}, "k", "x", f.boolean), None, id="optional-null"),
    pytest.param(lambda f: f.optional({"k": True}, "k", "x", f.boolean), True, id="optional-set"),
    pytest.param(
        lambda f: f.optional({"k": "a"}, "k", "x", f.choice, ("a",)), "a", id="optional-args"
    ),
]


@pytest.mark.parametrize(("read", "expected"), GOOD)
def test_good_values_come_back_typed(read: Read, expected: object) -> None:
    assert read(Fields("f.yaml")) == expected


def bad(name: str, read: Read, field: str, reason: str, wording: Wording = REPR) -> object:
    return pytest.param(wording, read, field, reason, id=name)


BAD = [
    bad("mapping", lambda f: f.mapping([1], "a.b"), "a.b", "expected a mapping, got list"),
    bad("mapping-null", lambda f: f.mapping(None, "a"), "a", "expected a mapping, got NoneType"),
    bad(
        "mapping-plain",
        lambda f: f.mapping([1], "a"),
        "a",
        "expected a mapping, got a list",
        PLAIN,
    ),
    bad(
        "unknown-key",
        lambda f: f.mapping({"b": 1, "z": 2}, "a", {"c", "b"}),
        "a.z",
        "unknown field (known: b, c)",
    ),
    bad(
        "unknown-at-top", lambda f: f.mapping({"z": 2}, "", {"c"}), "z", "unknown field (known: c)"
    ),
    bad("number-key", lambda f: f.mapping({5: 2}, "a", {"b"}), "a.5", "unknown field (known: b)"),
    bad(
        "unknown-key-plain",
        lambda f: f.mapping({"z": 2}, "a", ("c", "b")),
        "a.z",
        "unknown key (expected one of: c, b)",
        PLAIN,
    ),
    bad(
        "number-key-plain",
        lambda f: f.mapping({5: 2}, "a", ("b",)),
        "a",
        "keys must be strings, got 5",
        PLAIN,
    ),
    bad("list", lambda f: f.sequence("ab", "a"), "a", "expected a list, got str"),
    bad("list-plain", lambda f: f.sequence({}, "a"), "a", "expected a list, got a mapping", PLAIN),
    bad("string", lambda f: f.string(5, "a"), "a", "expected a string, got 5"),
    bad(
        "string-empty",
        lambda f: f.string("", "a", empty=False),
        "a",
        "expected a non-empty string, got ''",
    ),
    bad(
        "string-plain",
        lambda f: f.string(None, "a"),
        "a",
        "expected a string, got nothing (null)",
        PLAIN,
    ),
    bad("bool", lambda f: f.boolean("yes", "a"), "a", "expected true or false, got 'yes'"),
    bad(
        "bool-plain",
        lambda f: f.boolean(1, "a"),
        "a",
        "expected true or false, got a number",
        PLAIN,
    ),
    bad("int-bool", lambda f: f.integer(True, "a"), "a", "expected an integer, got True"),
    bad("int-float", lambda f: f.integer(1.0, "a"), "a", "expected an integer, got 1.0"),
    bad(
        "int-plain",
        lambda f: f.integer("1", "a"),
        "a",
        "expected a whole number, got a string",
        PLAIN,
    ),
    bad("minimum", lambda f: f.integer(0, "a", minimum=1), "a", "must be >= 1, got 0"),
    bad("maximum", lambda f: f.integer(11, "a", maximum=10), "a", "at most 10, got 11"),
    bad("choice", lambda f: f.choice("c", "a", ("a", "b")), "a", "'c' is not one of a, b"),
    bad(
        "optional-names-the-key",
        lambda f: f.optional({"k": "no"}, "k", "a", f.boolean),
        "a.k",
        "expected true or false, got 'no'",
    ),
]


@pytest.mark.parametrize(("wording", "read", "field", "reason"), BAD)
def test_bad_values_name_source_field_and_reason(
    wording: Wording, read: Read, field: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        read(Fields("f.yaml", wording=wording))
    assert (caught.value.source, caught.value.field, caught.value.reason) == (
        "f.yaml",
        field,
        reason,
    )
    assert str(caught.value) == f"f.yaml: {field}: {reason}"


def test_fail_at_the_top_names_only_the_source() -> None:
    assert str(Fields("f.yaml").fail("", "empty")) == "f.yaml: empty"


@pytest.mark.parametrize("mode", [UnknownKeys.COLLECT, UnknownKeys.WARN])
def test_unknown_keys_can_be_collected_instead_of_refused(
    mode: UnknownKeys, caplog: pytest.LogCaptureFixture
) -> None:
    fields = Fields("f.yaml", unknown=mode)
    with caplog.at_level(logging.WARNING, logger="accel_plugins.util.configfields"):
        data = fields.mapping({"a": 1, "zz": 2}, "top", {"a"})
        fields.mapping({"y": 3}, "", {"a"})
    assert data == {"a": 1, "zz": 2}
    assert fields.ignored == ["top.zz", "y"]
    warned = [r.getMessage() for r in caplog.records]
    if mode is UnknownKeys.WARN:
        assert warned == [
            "f.yaml: top.zz: unknown field, ignored",
            "f.yaml: y: unknown field, ignored",
        ]
    else:
        assert warned == []


def test_collecting_still_refuses_non_string_keys_where_the_wording_does() -> None:
    fields = Fields("f.yaml", wording=PLAIN, unknown=UnknownKeys.COLLECT)
    with pytest.raises(ConfigError, match="keys must be strings"):
        fields.mapping({1: 2}, "a", ("b",))


@pytest.mark.parametrize(
    ("where", "key", "path"),
    [("", "a", "a"), ("a", "b", "a.b"), ("a[0]", "b", "a[0].b"), ("", 5, "5")],
)
def test_at_joins_field_paths(where: str, key: object, path: str) -> None:
    assert at(where, key) == path
