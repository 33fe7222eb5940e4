"""Runs store operations on a psycopg connection, in one transaction (a savepoint if the
caller already has one open: that is how a submit joins the application's transaction)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from effectusd.store.operations import Operation, Rows
from effectusd.store.postgres.queries import sql

T = TypeVar("T")


def join_transaction(conn: psycopg.Connection[Any]) -> None:
    """Make sure an idle non-autocommit connection has its transaction open, so that what we
    write becomes part of it (a savepoint) instead of committing on its own."""
    if not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        conn.execute(sql("open_transaction"))


async def join_transaction_async(conn: psycopg.AsyncConnection[Any]) -> None:
    if not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        await conn.execute(sql("open_transaction"))


def run(conn: psycopg.Connection[Any], operation: Operation[T]) -> T:
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
        try:
            name, params = next(operation)
            while True:
                rows: Rows = []
                if not isinstance(params, Mapping):  # parameter rows: once per row
                    if params:
                        cursor.executemany(sql(name), params)
                else:
                    cursor.execute(sql(name), params)
                    rows = cursor.fetchall() if cursor.description else []
                name, params = operation.send(rows)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def run_async(
    conn: psycopg.AsyncConnection[Any], operation: Operation[T], *, transaction: bool = True
) -> T:
    """``transaction=False`` runs a one-statement operation on an autocommit connection
    without the BEGIN/COMMIT round trips (the statement is its own transaction)."""
    async with AsyncExitStack() as stack:
        if transaction:
            await stack.enter_async_context(conn.transaction())
        cursor = await stack.enter_async_context(conn.cursor(row_factory=dict_row))
        try:
            name, params = next(operation)
            while True:
                rows: Rows = []
                if not isinstance(params, Mapping):  # parameter rows: once per row
                    if params:  # pipelined by psycopg: one round trip for the batch
                        await cursor.executemany(sql(name), params)
                else:
                    await cursor.execute(sql(name), params)
                    rows = await cursor.fetchall() if cursor.description else []
                name, params = operation.send(rows)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
    raise AssertionError("unreachable")  # pragma: no cover
