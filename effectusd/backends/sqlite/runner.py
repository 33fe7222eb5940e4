"""Runs operations on a SQLite connection, in one transaction (a savepoint if the caller
already has one open: that is how a submit joins the application's transaction)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from effectusd.backends.operation import Operation, Query, Rows, drive
from effectusd.backends.sqlite.transaction import atomic, read_transaction
from effectusd.backends.statements import Statements

T = TypeVar("T")
_SAVEPOINT = "effectus_operation"


def join_transaction(conn: sqlite3.Connection) -> None:
    """Open the caller's transaction if its connection manages transactions implicitly and has
    none open yet, so that what we write commits (or rolls back) with the caller's work."""
    if conn.isolation_level is not None and not conn.in_transaction:
        conn.execute("BEGIN IMMEDIATE")


def adapted(params: Mapping[str, Any]) -> dict[str, Any]:
    """A statement's parameters in SQLite's terms: lists and objects travel as JSON text (SQL
    reads them with json_each / json_extract), durations as seconds (times are REAL Unix
    seconds)."""
    written: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, list | tuple | dict):
            value = json.dumps(value)
        elif isinstance(value, timedelta):
            value = value.total_seconds()
        written[key] = value
    return written


def execute(conn: sqlite3.Connection, statements: Statements, query: Query) -> Rows:
    """One step of an operation: the named statement once, or once per parameter row."""
    name, params = query
    cursor = conn.cursor()
    try:
        if not isinstance(params, Mapping):  # parameter rows: once per row
            if params:
                cursor.executemany(statements.text(name), map(adapted, params))
            return []
        cursor.execute(statements.text(name), adapted(params))
        if not cursor.description:
            return []
        columns = [column[0] for column in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    finally:
        cursor.close()


def run(conn: sqlite3.Connection, operation: Operation[T], statements: Statements) -> T:
    with atomic(conn, _SAVEPOINT):
        return drive(operation, partial(execute, conn, statements))


def run_read(conn: sqlite3.Connection, operation: Operation[T], statements: Statements) -> T:
    """A read-only operation: a deferred transaction, so readers never wait for the writer."""
    with read_transaction(conn):
        return drive(operation, partial(execute, conn, statements))
