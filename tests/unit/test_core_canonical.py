"""Canonical JSON (docs/design.md section 3): RFC 8785 bytes, the project's limits, strict
parsing."""

from __future__ import annotations

import json
from collections import UserDict
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from effectusd.core.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalJSONError,
    canonical_bytes,
    canonical_hash,
    canonical_text,
    json_problems,
    parse_json,
)

VECTOR_ARGS = {"order": "o-1", "currency": "EUR", "amount": 1250}
VECTOR_CANONICAL = b'{"amount":1250,"currency":"EUR","order":"o-1"}'
VECTOR_ARGUMENT_HASH = "c15a5ceb896021e05f9224fdba000d9c5dfb42b47fe52db99e0e8d3699ab34d4"

# Floats whose shortest ECMAScript form is an integer literal beyond 2^53 would re-parse as an
# out-of-range int; they are refused, so the round-trip properties stay inside that range.
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(
        min_value=-MAX_SAFE_INTEGER,
        max_value=MAX_SAFE_INTEGER,
        allow_nan=False,
        allow_infinity=False,
    )
    | st.floats(min_value=1e21, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def _reordered(value: Any) -> Any:
    """The same JSON value with every object's insertion order reversed."""
    if isinstance(value, dict):
        return {key: _reordered(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(item) for item in value]
    return value


def _utf16_key(text: str) -> bytes:
    return text.encode("utf-16-be")


# --- docs/design.md section 2 vectors -------------------------------------------------------------


def test_design_vector_arguments_canonicalise_to_sorted_compact_bytes() -> None:
    assert canonical_bytes(VECTOR_ARGS) == VECTOR_CANONICAL
    assert canonical_text(VECTOR_ARGS) == VECTOR_CANONICAL.decode("utf-8")


def test_design_vector_argument_hash_is_sha256_of_canonical_bytes() -> None:
    assert canonical_hash(VECTOR_ARGS) == VECTOR_ARGUMENT_HASH


# --- properties --------------------------------------------------------------------------------


@given(json_values)
def test_canonical_bytes_are_a_fixed_point_of_parse_then_canonicalise(value: Any) -> None:
    first = canonical_bytes(value)
    assert canonical_bytes(parse_json(first)) == first
    assert canonical_bytes(json.loads(first)) == first


@given(json_values)
def test_canonical_bytes_do_not_depend_on_dict_insertion_order(value: Any) -> None:
    assert canonical_bytes(_reordered(value)) == canonical_bytes(value)


@given(st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=8))
def test_object_keys_are_emitted_in_utf16_code_unit_order(value: dict[str, int]) -> None:
    emitted = list(json.loads(canonical_bytes(value), object_pairs_hook=lambda pairs: pairs))
    assert [key for key, _ in emitted] == sorted(value, key=_utf16_key)


def test_astral_key_sorts_before_bmp_private_use_key_as_utf16_requires() -> None:
    # Code point order would put U+E000 first; UTF-16 puts the surrogate pair (0xD83D…) first.
    emitted = list(json.loads(canonical_bytes({"\ue000": 1, "\U0001f600": 2})))
    assert emitted == ["\U0001f600", "\ue000"]


@given(st.text())
def test_strings_survive_canonicalisation_without_unicode_normalisation(text: str) -> None:
    assert json.loads(canonical_bytes({"s": text})) == {"s": text}


def test_composed_and_decomposed_accents_give_different_bytes() -> None:
    assert canonical_bytes("\u00e9") != canonical_bytes("e\u0301")


@given(json_values)
def test_canonical_bytes_parse_back_to_an_equal_value(value: Any) -> None:
    assert json.loads(canonical_bytes(value)) == value


def test_tuples_canonicalise_like_lists() -> None:
    assert canonical_bytes({"a": (1, "x")}) == canonical_bytes({"a": [1, "x"]})


# --- limits, reported by path ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"a": {"b": float("nan")}}, "$.a.b", "NaN"),
        ({"a": [0, float("inf")]}, "$.a[1]", "Infinity"),
        ({"a": [float("-inf")]}, "$.a[0]", "Infinity"),
        ({"big": 2**60}, "$.big", "2^53"),
        ({"low": -(2**53)}, "$.low", "2^53"),
        ({"high": 2**53}, "$.high", "2^53"),
        ({"a": {1: "x"}}, "$.a", "not a string"),
        ({"a": ["ok", "bad\ud800"]}, "$.a[1]", "surrogate"),
        ({"a": {"k\udc00": 1}}, "$.a", "surrogate"),
        ({"a": {1, 2}}, "$.a", "set"),
        ({"a": b"bytes"}, "$.a", "bytes"),
        ({"a b": {"c": float("nan")}}, '$["a b"].c', "NaN"),
    ],
)
def test_values_outside_canonical_json_are_rejected_naming_the_path(
    value: Any, path: str, reason: str
) -> None:
    with pytest.raises(CanonicalJSONError) as excinfo:
        canonical_bytes(value)
    assert len(excinfo.value.problems) == 1
    problem = excinfo.value.problems[0]
    assert problem.startswith(f"{path}: ")
    assert reason in problem


@pytest.mark.parametrize("number", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0, True, False, None])
def test_safe_integer_bounds_and_literals_are_accepted(number: Any) -> None:
    assert json.loads(canonical_bytes({"n": number})) == {"n": number}


@given(st.integers(min_value=MAX_SAFE_INTEGER + 1) | st.integers(max_value=-MAX_SAFE_INTEGER - 1))
def test_every_integer_beyond_the_safe_range_is_rejected(number: int) -> None:
    assert json_problems(number) == ["$: integer outside ±(2^53-1)"]


def test_dotted_key_and_nested_keys_get_distinct_paths() -> None:
    flat = json_problems({"a.b": float("nan")})
    nested = json_problems({"a": {"b": float("nan")}})
    assert flat != nested


def test_every_problem_is_reported_at_once() -> None:
    value = {
        "nan": float("nan"),
        "inf": float("inf"),
        "big": 2**60,
        "keys": {1: "x"},
        "text": "\ud800",
        "set": {1},
        "ok": [1, "fine", None],
    }
    with pytest.raises(CanonicalJSONError) as excinfo:
        canonical_bytes(value)
    paths = sorted(problem.split(": ", 1)[0] for problem in excinfo.value.problems)
    assert paths == ["$.big", "$.inf", "$.keys", "$.nan", "$.set", "$.text"]
    for problem in excinfo.value.problems:
        assert problem in str(excinfo.value)


def test_json_problems_uses_the_given_root_path() -> None:
    assert json_problems({"x": float("nan")}, "steps[2].args")[0].startswith("steps[2].args.x: ")


def test_a_non_dict_mapping_is_rejected_as_canonical_json_error_by_path() -> None:
    with pytest.raises(CanonicalJSONError) as excinfo:
        canonical_bytes({"a": UserDict({"b": 1})})
    assert excinfo.value.problems[0].startswith("$.a")


@pytest.mark.parametrize("number", [1e16, -1e16, float(2**53), 1e20])
def test_accepted_large_integral_float_survives_a_round_trip(number: float) -> None:
    try:
        first = canonical_bytes({"n": number})
    except CanonicalJSONError:
        return  # rejecting it up front is an acceptable fix too
    assert canonical_bytes(parse_json(first)) == first


# --- strict parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "literal"),
    [("NaN", "NaN"), ('{"a": [Infinity]}', "Infinity"), ('{"a": -Infinity}', "-Infinity")],
)
def test_parse_json_rejects_nan_and_infinity_literals(text: str, literal: str) -> None:
    with pytest.raises(ValueError, match=literal):
        parse_json(text)


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"x": {"a": 1, "a": 1}}'])
def test_parse_json_rejects_duplicate_keys_naming_the_key(text: str) -> None:
    with pytest.raises(ValueError, match="duplicate object key 'a'"):
        parse_json(text)


@pytest.mark.parametrize(
    ("text", "where"),
    [('{"a":', "line 1 column 6"), ("[1,]", "line 1 column 4"), ('{"a": 1}\n x', "line 2")],
)
def test_parse_json_reports_malformed_json_with_its_position(text: str, where: str) -> None:
    with pytest.raises(ValueError, match="malformed JSON") as excinfo:
        parse_json(text)
    assert where in str(excinfo.value)


def test_parse_json_accepts_bytes_and_keeps_key_order_irrelevant_to_canonical_form() -> None:
    parsed = parse_json(b'{"order":"o-1","currency":"EUR","amount":1250}')
    assert canonical_bytes(parsed) == VECTOR_CANONICAL


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-16"])
def test_parse_json_decodes_bytes_as_json_loads_does(encoding: str) -> None:
    """parse_json keeps one decoder and decodes bytes itself: as json.loads would, by the
    encoding it detects (a destination may answer in any of the encodings JSON allows)."""
    text = '{"name":"Müller","emoji":"\U0001f600","n":[1,2.5,null,true]}'
    data = text.encode(encoding)
    assert parse_json(data) == json.loads(data) == json.loads(text)


def test_parse_json_treats_a_byte_order_mark_as_json_loads_does() -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads("\ufeff{}")
    with pytest.raises(ValueError, match="malformed JSON: Unexpected UTF-8 BOM"):
        parse_json("\ufeff{}")
    # As bytes, json.loads takes a UTF-8 BOM for the encoding's mark (utf-8-sig): so do we.
    assert parse_json(b"\xef\xbb\xbf{}") == json.loads(b"\xef\xbb\xbf{}") == {}


def test_parse_json_keeps_its_hooks_across_calls() -> None:
    """The shared decoder refuses duplicates and constants on every call, not only the first."""
    for _ in range(3):
        assert parse_json(b'{"a":1}') == {"a": 1}
        with pytest.raises(ValueError, match="duplicate object key 'a'"):
            parse_json(b'{"a":1,"a":1}')
        with pytest.raises(ValueError, match="NaN"):
            parse_json("[NaN]")


# --- the plain fast path (canonical._plain): the same bytes as rfc8785 -----------------------

# Only what the fast path takes (ASCII keys; text of any kind, control characters, lone
# surrogates included), and at its edges the values it must leave to rfc8785 (any key, integers
# past 2^53-1, floats, tuples, too deep).
plain_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER - 2, max_value=MAX_SAFE_INTEGER + 2)
    | st.text()
    | st.text(alphabet=st.characters(max_codepoint=0x20))
    | st.sampled_from(["\ud800", "\u2028", "\x7f", '"\\/', "\U0001f600", "\ue000"])
)
plain_values = st.recursive(
    plain_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(alphabet=st.characters(max_codepoint=0x7F)), children, max_size=4)
        | st.dictionaries(st.text(max_size=3), children, max_size=3)
        | st.tuples(children)
        | st.floats(allow_nan=False, allow_infinity=False).map(lambda number: [number])
    ),
    max_leaves=25,
)


def _written(value: Any) -> bytes | list[str]:
    """What canonical_bytes makes of ``value``: its bytes, or every problem it refuses."""
    try:
        return canonical_bytes(value)
    except CanonicalJSONError as refused:
        return refused.problems


def _reference(value: Any) -> bytes | list[str]:
    """What canonical_bytes gave before its fast path: every problem, or rfc8785's bytes."""
    return json_problems(value, storable=False) or rfc8785.dumps(value)


@given(plain_values)
def test_the_fast_path_writes_exactly_the_bytes_rfc8785_writes(value: Any) -> None:
    assert _written(value) == _reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [True, None, 'x\n\x01"\\'], "c": {"é": 2}},  # a non-ASCII key: rfc8785
        {"\U0001f600": 1, "\ue000": 2},  # UTF-16 order differs from code point order here
        {"n": MAX_SAFE_INTEGER + 1},  # refused, by path
        {"s": "\udc00"},  # a lone surrogate: refused, by path
        [[[[1]]]] * 2,
        "\u2028\x7f",
    ],
)
def test_values_at_the_fast_paths_edges_match_rfc8785(value: Any) -> None:
    assert _written(value) == _reference(value)


def test_a_value_nested_past_the_limit_is_refused_on_either_path() -> None:
    deep: Any = 1
    for _ in range(70):
        deep = [deep]
    with pytest.raises(CanonicalJSONError, match="nests deeper than 64"):
        canonical_bytes(deep)
