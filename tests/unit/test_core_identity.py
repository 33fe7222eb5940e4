"""Identities (docs/design.md section 2): the fixed vectors and the properties of H(tag, c1..cn)."""

from __future__ import annotations

import hashlib
import inspect

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from effectusd.core.canonical import canonical_bytes
from effectusd.core.identity import (
    KEY_TAG,
    SAGA_TAG,
    argument_hash,
    idempotency_key,
    saga_id,
    saga_id_prefix,
    tagged_hash,
)
from effectusd.core.states import Direction

VECTOR_SAGA_ID = "53c4d5234ab09a8d5912898c4e385b0a86809796ccca87c3959d7755085345f8"
VECTOR_FORWARD_KEY = "8574e6019624ecdc867c223762cb0e8f2f1bca2924d07b3563fd0c977bbbab6e"
VECTOR_COMPENSATION_KEY = "1f6a13cbde0f5e5d5eacddf74ea107b1474ea453501d7c2e3fd8e0c8747b2d5b"
VECTOR_ARGUMENT_HASH = "c15a5ceb896021e05f9224fdba000d9c5dfb42b47fe52db99e0e8d3699ab34d4"

components = st.lists(st.text(max_size=8), max_size=5)


def _spec_hash(tag: str, *parts: str) -> str:
    """H as docs/design.md words it, written independently of the implementation."""
    data = tag.encode("ascii") + b"\x00"
    for part in parts:
        encoded = part.encode("utf-8")
        data += len(encoded).to_bytes(8, "big") + encoded
    return hashlib.sha256(data).hexdigest()


# --- docs/design.md section 2 vectors -------------------------------------------------------------


def test_design_vector_saga_id() -> None:
    assert saga_id("default", "order-7", "checkout") == VECTOR_SAGA_ID


def test_design_vector_forward_idempotency_key() -> None:
    assert idempotency_key("default", VECTOR_SAGA_ID, "charge", Direction.FORWARD) == (
        VECTOR_FORWARD_KEY
    )


def test_design_vector_compensation_idempotency_key() -> None:
    assert idempotency_key("default", VECTOR_SAGA_ID, "charge", Direction.COMPENSATION) == (
        VECTOR_COMPENSATION_KEY
    )


def test_design_vector_argument_hash() -> None:
    args = {"order": "o-1", "currency": "EUR", "amount": 1250}
    assert argument_hash(canonical_bytes(args)) == VECTOR_ARGUMENT_HASH


def test_tags_are_the_published_versioned_strings() -> None:
    assert (SAGA_TAG, KEY_TAG) == ("effectusd/saga/v1", "effectusd/key/v1")


# --- H(tag, c1..cn) ----------------------------------------------------------------------------


@given(st.sampled_from([SAGA_TAG, KEY_TAG, "t"]), components)
def test_tagged_hash_follows_the_documented_byte_layout(tag: str, parts: list[str]) -> None:
    assert tagged_hash(tag, *parts) == _spec_hash(tag, *parts)


def test_length_prefix_separates_ab_c_from_a_bc() -> None:
    assert tagged_hash(SAGA_TAG, "ab", "c") != tagged_hash(SAGA_TAG, "a", "bc")


@given(st.text(min_size=1, max_size=12), st.data())
def test_different_splits_of_the_same_text_never_collide(text: str, data: st.DataObject) -> None:
    first = data.draw(st.integers(0, len(text)))
    second = data.draw(st.integers(0, len(text)))
    assume(first != second)
    assert tagged_hash(KEY_TAG, text[:first], text[first:]) != tagged_hash(
        KEY_TAG, text[:second], text[second:]
    )


def test_empty_component_still_counts() -> None:
    assert tagged_hash(SAGA_TAG, "a") != tagged_hash(SAGA_TAG, "a", "")
    assert tagged_hash(SAGA_TAG) != tagged_hash(SAGA_TAG, "")


def test_component_length_is_counted_in_utf8_bytes_not_characters() -> None:
    # "é" is 2 UTF-8 bytes: a character count would make these two layouts ambiguous.
    assert tagged_hash(SAGA_TAG, "é") == _spec_hash(SAGA_TAG, "é")
    assert tagged_hash(SAGA_TAG, "é", "x") != tagged_hash(SAGA_TAG, "éx")


@given(components)
def test_saga_and_key_tags_separate_the_same_components(parts: list[str]) -> None:
    assert tagged_hash(SAGA_TAG, *parts) != tagged_hash(KEY_TAG, *parts)


def test_tag_and_first_component_cannot_trade_bytes() -> None:
    assert tagged_hash("effectusd/saga/v1", "x") != tagged_hash("effectusd/saga/v", "1x")


def test_saga_id_is_not_a_key_of_the_same_components() -> None:
    assert saga_id("a", "b", "c") != tagged_hash(KEY_TAG, "a", "b", "c")


@given(st.text(max_size=6), st.text(max_size=6), st.text(max_size=6), st.text(max_size=6))
def test_saga_id_depends_on_namespace_execution_and_plan(
    namespace: str, execution: str, plan: str, other: str
) -> None:
    base = saga_id(namespace, execution, plan)
    assert saga_id(namespace, execution, plan) == base
    if other != namespace:
        assert saga_id(other, execution, plan) != base
    if other != execution:
        assert saga_id(namespace, other, plan) != base
    if other != plan:
        assert saga_id(namespace, execution, other) != base


def test_hash_is_lowercase_hex_sha256() -> None:
    value = saga_id("default", "order-7", "checkout")
    assert len(value) == 64
    assert value == value.lower()
    int(value, 16)


# --- idempotency key ---------------------------------------------------------------------------


def test_attempt_is_never_an_input_of_the_idempotency_key() -> None:
    parameters = list(inspect.signature(idempotency_key).parameters)
    assert parameters == ["namespace", "saga", "effect_id", "direction"]


@given(st.text(max_size=8), st.text(max_size=8), st.text(max_size=8))
def test_direction_changes_the_idempotency_key(namespace: str, saga: str, effect: str) -> None:
    forward = idempotency_key(namespace, saga, effect, Direction.FORWARD)
    compensation = idempotency_key(namespace, saga, effect, Direction.COMPENSATION)
    assert forward != compensation
    assert forward == idempotency_key(namespace, saga, effect, Direction.FORWARD)


def test_idempotency_key_accepts_the_stored_direction_string() -> None:
    assert idempotency_key("default", VECTOR_SAGA_ID, "charge", "forward") == VECTOR_FORWARD_KEY  # type: ignore[arg-type]


def test_idempotency_key_refuses_an_unknown_direction() -> None:
    with pytest.raises(ValueError, match="backward"):
        idempotency_key("default", VECTOR_SAGA_ID, "charge", "backward")  # type: ignore[arg-type]


@given(st.text(max_size=8))
def test_effect_id_changes_the_idempotency_key(effect: str) -> None:
    assume(effect != "charge")
    assert idempotency_key("default", VECTOR_SAGA_ID, effect, Direction.FORWARD) != (
        VECTOR_FORWARD_KEY
    )


@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        ("c0ae75b9ed3c…", "c0ae75b9ed3c"),  # as `sagas list` prints it
        ("c0ae75b9ed3c...", "c0ae75b9ed3c"),
        ("  C0AE75B9  ", "c0ae75b9"),
        ("0", "0"),
        ("a" * 64, "a" * 64),
        ("a" * 65, None),  # longer than any id
        ("order-7", None),
        ("", None),
        ("…", None),
        ("c0 ae", None),
    ],
)
def test_a_saga_id_prefix_is_read_as_a_person_writes_it(text: str, prefix: str | None) -> None:
    assert saga_id_prefix(text) == prefix
