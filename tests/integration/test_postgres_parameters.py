"""Lists sent to PostgreSQL as array literals (effectusd/backends/postgres/runner.py) read back
as the very lists psycopg would have sent, whatever their texts hold."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effectusd.backends.postgres.runner import array_text, with_array_texts

pytestmark = pytest.mark.postgres

# PostgreSQL text holds any character but NUL; surrogates cannot be encoded at all.
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
BIGINT = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.one_of(TEXT, st.none()), max_size=8), numbers=st.lists(BIGINT))
def test_text_and_bigint_lists_read_back_unchanged(
    database_url: str, texts: list[str | None], numbers: list[int]
) -> None:
    params = with_array_texts({"texts": texts, "numbers": numbers, "kept": "x"})
    assert params["kept"] == "x"
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT %(texts)s::text[], %(numbers)s::bigint[], %(kept)s::text", params
        ).fetchone()
    assert row == (texts, numbers, "x")


@pytest.mark.parametrize(
    "text", ['"', "\\", '\\"', "{a,b}", "NULL", "null", " padded ", "", "a,b", "é\u2028"]
)
def test_texts_that_mean_something_in_an_array_literal_stay_texts(
    database_url: str, text: str
) -> None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT %(v)s::text[]", {"v": array_text([text, None])}).fetchone()
    assert row == ([text, None],)


def test_a_list_of_anything_else_is_left_for_psycopg() -> None:
    nested: list[Any] = [[1, 2]]
    assert array_text(nested) is nested
    assert array_text([1.5]) == [1.5]
    assert array_text([True]) == [True]
