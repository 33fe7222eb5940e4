"""Argument expressions: $fact, $result with a JSON Pointer, and the $literal escape."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectusd.core.expressions import (
    FactRef,
    ResolutionError,
    ResultRef,
    is_literal,
    json_pointer,
    resolve,
    scan,
)

RESULT = {
    "id": "r-1",
    "a/b": "slash",
    "m~n": "tilde",
    "~1": "tilde-one",
    "": "empty-key",
    "lines": [{"sku": "A"}, {"sku": "B"}],
    "nested": {"deep": {"value": 7}},
}


# --- resolve -----------------------------------------------------------------------------------


def test_resolve_substitutes_inside_nested_objects_and_arrays() -> None:
    args = {
        "amount": {"$fact": "amount"},
        "meta": {"ref": {"$result": "reserve", "path": "/id"}, "fixed": [1, {"$fact": "order"}]},
        "all": {"$result": "reserve"},
    }
    resolved = resolve(args, {"amount": 5, "order": "o-1"}, {"reserve": RESULT})
    assert resolved == {
        "amount": 5,
        "meta": {"ref": "r-1", "fixed": [1, "o-1"]},
        "all": RESULT,
    }


def test_literal_escape_keeps_an_expression_looking_object_verbatim() -> None:
    args = {"note": {"$literal": {"$fact": "amount"}}, "list": {"$literal": [{"$result": "x"}]}}
    resolved = resolve(args, {"amount": 5}, {})
    assert resolved == {"note": {"$fact": "amount"}, "list": [{"$result": "x"}]}


def test_literal_objects_are_not_reported_as_references() -> None:
    refs, problems = scan({"note": {"$literal": {"$fact": "ghost"}}}, "args")
    assert (refs, problems) == ([], [])
    assert is_literal({"note": {"$literal": {"$fact": "ghost"}}})


def test_resolve_leaves_plain_literals_untouched() -> None:
    value = {"a": [1, 2.5, None, True, "s", {"b": []}]}
    assert resolve(value, {}, {}) == value


def test_missing_fact_raises_naming_the_fact() -> None:
    with pytest.raises(ResolutionError, match="'amount'"):
        resolve({"x": [{"$fact": "amount"}]}, {}, {})


def test_missing_step_result_raises_naming_the_step() -> None:
    with pytest.raises(ResolutionError, match="'reserve'"):
        resolve({"x": {"$result": "reserve", "path": "/id"}}, {}, {})


def test_missing_pointer_raises_naming_the_pointer() -> None:
    with pytest.raises(ResolutionError, match="'/nested/deep/absent'"):
        resolve({"x": {"$result": "r", "path": "/nested/deep/absent"}}, {}, {"r": RESULT})


# --- JSON Pointer (RFC 6901) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("", RESULT),
        ("/id", "r-1"),
        ("/a~1b", "slash"),
        ("/m~0n", "tilde"),
        ("/~01", "tilde-one"),
        ("/", "empty-key"),
        ("/lines/0/sku", "A"),
        ("/lines/1", {"sku": "B"}),
        ("/nested/deep/value", 7),
    ],
)
def test_json_pointer_follows_rfc6901(pointer: str, expected: Any) -> None:
    assert json_pointer(RESULT, pointer) == expected


@pytest.mark.parametrize(
    "pointer", ["/absent", "/lines/2", "/lines/-", "/lines/-1", "/lines/x", "/id/0", "/a/b"]
)
def test_json_pointer_that_matches_nothing_raises_naming_it(pointer: str) -> None:
    with pytest.raises(ResolutionError) as excinfo:
        json_pointer(RESULT, pointer)
    assert repr(pointer) in str(excinfo.value)


@given(st.dictionaries(st.text(max_size=5), st.integers(), min_size=1))
def test_every_key_is_reachable_through_its_escaped_pointer(document: dict[str, int]) -> None:
    for key, value in document.items():
        pointer = "/" + key.replace("~", "~0").replace("/", "~1")
        assert json_pointer(document, pointer) == value


@pytest.mark.parametrize("pointer", ["/lines/01", "/lines/\u0661", "/lines/\u00b2"])
def test_json_pointer_array_index_must_be_plain_ascii_digits_without_leading_zero(
    pointer: str,
) -> None:
    with pytest.raises(ResolutionError):
        json_pointer(RESULT, pointer)


def test_json_pointer_without_leading_slash_is_refused() -> None:
    with pytest.raises(ResolutionError):
        json_pointer(RESULT, "id")


# --- scan --------------------------------------------------------------------------------------


def test_scan_reports_every_reference_with_its_path() -> None:
    args = {
        "a": {"$fact": "amount"},
        "b": [{"x": {"$result": "reserve", "path": "/id"}}],
        "c": {"$result": "reserve"},
    }
    refs, problems = scan(args, "steps[0].args")
    assert problems == []
    assert refs == [
        FactRef("amount", "steps[0].args.a"),
        ResultRef("reserve", "/id", "steps[0].args.b[0].x"),
        ResultRef("reserve", "", "steps[0].args.c"),
    ]


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ({"$fact": "a", "$literal": 1}, "exactly one"),
        ({"$fact": "a", "path": "/x"}, "unexpected key(s) path"),
        ({"$literal": 1, "other": 2}, "unexpected key(s) other"),
        ({"$result": "s", "path": "/x", "extra": 1}, "unexpected key(s) extra"),
        ({"$fact": ""}, "non-empty string"),
        ({"$fact": 3}, "non-empty string"),
        ({"$result": None}, "non-empty string"),
        ({"$result": "s", "path": "id"}, "JSON Pointer"),
        ({"$result": "s", "path": 3}, "JSON Pointer"),
    ],
)
def test_scan_reports_malformed_expressions_by_path(
    expression: dict[str, Any], fragment: str
) -> None:
    refs, problems = scan({"outer": [expression]}, "args")
    assert refs == []
    assert len(problems) == 1
    assert problems[0].startswith("args.outer[0]: ")
    assert fragment in problems[0]


def test_is_literal_is_false_for_any_reference_or_malformed_expression() -> None:
    assert not is_literal({"a": [{"$fact": "x"}]})
    assert not is_literal({"a": {"$fact": ""}})
    assert is_literal({"a": [1, {"b": "c"}]})
