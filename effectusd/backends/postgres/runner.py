"""Runs operations on a psycopg connection, in one transaction (a savepoint if the caller
already has one open: that is how a submit joins the application's transaction)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from functools import cache, partial
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg import sql as psql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.sql import SQL as SQL  # re-exported: the type of a named statement

from effectusd.backends.operation import Operation, Query, Rows, drive, drive_async
from effectusd.backends.statements import Statements

T = TypeVar("T")


@cache
def sql(statements: Statements, name: str) -> SQL:
    return SQL(statements.text(name))


def set_based(
    statements: Statements, name: str, rows: Sequence[Mapping[str, Any]]
) -> tuple[psql.SQL, dict[str, str]] | None:
    """``NAME_many.sql``, where there is one, runs a batch as one statement over its rows,
    sent as one JSON array (``%(rows)s``, read with json_to_recordset): one statement per
    batch instead of one per row, which is most of what a group commit costs the daemon. One
    JSON text instead of an array per column, because psycopg inspects every element of a list
    parameter to type it: a quarter of the recorder's time went there. None: run NAME once
    per row.

    orjson writes the array (a tenth of json's time; timestamps in the ISO form PostgreSQL
    reads). What a row carries is the engine's own: ids, states, counts, timestamps, finite
    delays, and documents from outside (results, evidence, details) already encoded by the
    standard library, whose NaN PostgreSQL refuses, so a poisoned answer still fails its
    statement (orjson would have written it as null)."""
    many = f"{name}_many"
    if len(rows) < 2 or many not in statements.names():
        return None  # one row: the plain statement plans and runs faster than the array form
    return sql(statements, many), {"rows": json_rows(rows)}


def json_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """Parameter rows as the one JSON array a statement reads with json_to_recordset (a
    ``_many`` statement's, insert_dispatch_claimed's): the one encoding of rows in transit,
    orjson's (see ``set_based``)."""
    return orjson.dumps(rows).decode()


# past 64 bits: twenty digits, or nineteen after a minus (below -2**63)
_LONG_INTEGER = re.compile(rb"-[0-9]{19}|[0-9]{20}")


def loads_document(data: bytes | bytearray | memoryview | str) -> Any:
    """A json/jsonb value as the standard library reads it, in a fifth of its time: orjson
    reads it, except where the two differ. orjson reads an integer past 64 bits as a float
    (the standard library keeps it exact; jsonb keeps any number) and refuses a number past
    the float range (the standard library gives inf): a run of twenty digits (nineteen after
    a minus), or a text orjson refuses, is read by the standard library. One difference is
    kept: orjson reads nesting up to 1,024 levels, past the standard library's recursion
    limit (about 990 here), which effectusd never writes (64 levels at most). The daemon's
    locked reads and claims load about ten such values per step (step results, facts,
    fencing resources)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if _LONG_INTEGER.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def with_array_texts(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """``params`` with each list of ids, counts and texts written as a PostgreSQL array
    literal (every statement casts its array parameters, e.g. ``%(ids)s::bigint[]``).
    psycopg types a list parameter by inspecting and dumping each element in Python, a few
    µs per element (the claim, the write-ahead and the recorder's locked reads send one list
    element or more per step); the literal is one join. ``params`` itself where it has no
    list."""
    written: dict[str, Any] | None = None
    for key, value in params.items():
        if type(value) is list:
            if written is None:
                written = dict(params)
            written[key] = array_text(value)
    return params if written is None else written


def array_text(values: list[Any]) -> str | list[Any]:
    """The array literal of ``values`` (None, int and str elements), every text element
    double-quoted with its backslashes and quotes escaped, so any text reads back as itself;
    a list with anything else (a nested list, a timestamp) is left for psycopg to adapt."""
    items = []
    for value in values:
        if type(value) is str:
            items.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
        elif type(value) is int:
            items.append(str(value))
        elif value is None:
            items.append("NULL")
        else:
            return values
    return "{" + ",".join(items) + "}"


def join_transaction(conn: psycopg.Connection[Any], statements: Statements) -> None:
    """Make sure an idle non-autocommit connection has its transaction open, so that what we
    write becomes part of it (a savepoint) instead of committing on its own."""
    if not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        conn.execute(sql(statements, "open_transaction"))


async def join_transaction_async(
    conn: psycopg.AsyncConnection[Any], statements: Statements
) -> None:
    if not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        await conn.execute(sql(statements, "open_transaction"))


def run(conn: psycopg.Connection[Any], operation: Operation[T], statements: Statements) -> T:
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
        return drive(operation, partial(_execute, cursor, statements))


async def run_async(
    conn: psycopg.AsyncConnection[Any],
    operation: Operation[T],
    statements: Statements,
    *,
    transaction: bool = True,
) -> T:
    """``transaction=False`` runs a one-statement operation on an autocommit connection
    without the BEGIN/COMMIT round trips (each statement is its own transaction)."""
    async with AsyncExitStack() as stack:
        if transaction:
            await stack.enter_async_context(conn.transaction())
        cursor = await stack.enter_async_context(conn.cursor(row_factory=dict_row))
        return await drive_async(operation, partial(_execute_async, cursor, statements))
    raise AssertionError("unreachable")  # pragma: no cover


def _execute(cursor: psycopg.Cursor[Any], statements: Statements, query: Query) -> Rows:
    """One step of an operation: the named statement once (its rows), or over parameter rows
    (no rows back), set-based where it can be, else once per row (pipelined by psycopg)."""
    name, params = query
    if isinstance(params, Mapping):
        cursor.execute(sql(statements, name), with_array_texts(params))
        return cursor.fetchall() if cursor.description else []
    many = set_based(statements, name, params)
    if many is not None:
        cursor.execute(*many)
    elif params:
        cursor.executemany(sql(statements, name), params)
    return []


async def _execute_async(
    cursor: psycopg.AsyncCursor[Any], statements: Statements, query: Query
) -> Rows:
    """``_execute`` on an asynchronous cursor."""
    name, params = query
    if isinstance(params, Mapping):
        await cursor.execute(sql(statements, name), with_array_texts(params))
        return await cursor.fetchall() if cursor.description else []
    many = set_based(statements, name, params)
    if many is not None:
        await cursor.execute(*many)
    elif params:
        await cursor.executemany(sql(statements, name), params)
    return []


def connection_state(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> str:
    """ "idle" (no transaction open), "broken" (known lost) or "in_transaction"."""
    status = conn.info.transaction_status
    if status == TransactionStatus.UNKNOWN:
        return "broken"
    return "idle" if status == TransactionStatus.IDLE else "in_transaction"
