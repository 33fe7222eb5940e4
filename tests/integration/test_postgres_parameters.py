"""Lists sent to PostgreSQL as array literals (effectusd/backends/postgres/runner.py) read back
as the very lists psycopg would have sent, whatever their texts hold; json and jsonb values
read on the daemon's connections are the values the standard library reads."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.pq import Format

from effectusd.backends.postgres.runner import array_text, loads_document, with_array_texts
from effectusd.backends.postgres.session import PoolSession
from effectusd.store.sql import POSTGRES_STATEMENTS as STORE_STATEMENTS

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


# --- json/jsonb values read by the daemon's connections (runner.loads_document) -------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # any size: jsonb keeps every digit
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300)
@given(document=JSON)
def test_a_document_reads_as_the_standard_library_reads_it(document: Any) -> None:
    text = json.dumps(document)
    # dumps again: 1 and 1.0 compare equal, but are not the same document
    assert json.dumps(loads_document(text)) == json.dumps(json.loads(text))
    assert json.dumps(loads_document(text.encode())) == text


@pytest.mark.parametrize(
    "text",
    [
        "123456789012345678901234567890",  # past 64 bits: orjson would give a float
        "-18446744073709551617",
        "-9223372036854775809",  # one below -2**63: nineteen digits, past orjson's integers
        "[-9223372036854775809, 1]",
        "[1E+400]",  # past the float range: the standard library gives inf, orjson refuses
        '{"amount": 1.10, "n": 18446744073709551615}',
    ],
)
def test_numbers_where_orjson_differs_read_exactly(text: str) -> None:
    assert repr(loads_document(text)) == repr(json.loads(text))
    assert repr(loads_document(memoryview(text.encode()))) == repr(json.loads(text))


async def test_the_daemons_connections_read_json_and_jsonb_with_it(database_url: str) -> None:
    session = await PoolSession.open(database_url, STORE_STATEMENTS, 1, 1)
    try:
        async with session.pool.connection() as conn:
            loaders = [
                conn.adapters.get_loader(conn.adapters.types[name].oid, Format.TEXT)
                for name in ("json", "jsonb")
            ]
            cursor = await conn.execute(
                'SELECT \'{"n": 123456789012345678901234567890, "x": [1.5, "é"]}\'::jsonb'
            )
            row = await cursor.fetchone()
    finally:
        await session.close()
    assert [getattr(loader, "_loads", None) for loader in loaders] == [loads_document] * 2
    assert row is not None
    assert row[0] == {"n": 123456789012345678901234567890, "x": [1.5, "é"]}
    assert type(row[0]["n"]) is int
