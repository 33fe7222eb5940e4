"""Runs store operations on a psycopg connection, in one transaction (a savepoint if the
caller already has one open: that is how a submit joins the application's transaction)."""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from effectusd.store.operations import Operation
from effectusd.store.postgres.queries import sql

T = TypeVar("T")


def run(conn: psycopg.Connection[Any], operation: Operation[T]) -> T:
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
        try:
            name, params = next(operation)
            while True:
                cursor.execute(sql(name), params)
                rows = cursor.fetchall() if cursor.description else []
                name, params = operation.send(rows)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def run_async(conn: psycopg.AsyncConnection[Any], operation: Operation[T]) -> T:
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cursor:
        try:
            name, params = next(operation)
            while True:
                await cursor.execute(sql(name), params)
                rows = await cursor.fetchall() if cursor.description else []
                name, params = operation.send(rows)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
