"""Runs store operations on a SQLite connection, in one transaction (a savepoint if the
caller already has one open: that is how a submit joins the application's transaction).

Writers take the file's write lock up front (``BEGIN IMMEDIATE``): a transaction that read
first and wrote later could otherwise fail with SQLITE_BUSY instead of waiting its turn, and
holding the lock for the whole transaction is what makes each guarded read-then-write a
compare-and-set.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, TypeVar

from effectusd.store.operations import Operation
from effectusd.store.sqlite.queries import sql

T = TypeVar("T")
_SAVEPOINT = "effectus_operation"


def join_transaction(conn: sqlite3.Connection) -> None:
    """Open the caller's transaction if its connection manages transactions implicitly and has
    none open yet, so that what we write commits (or rolls back) with the caller's work."""
    if conn.isolation_level is not None and not conn.in_transaction:
        conn.execute("BEGIN IMMEDIATE")


def _adapt(params: Mapping[str, Any]) -> dict[str, Any]:
    """Lists and objects travel as JSON text; SQL reads them with json_each / json_extract."""
    return {
        key: json.dumps(value) if isinstance(value, list | tuple | dict) else value
        for key, value in params.items()
    }


def _drive(conn: sqlite3.Connection, operation: Operation[T]) -> T:
    cursor = conn.cursor()
    try:
        name, params = next(operation)
        while True:
            rows: list[dict[str, Any]] = []
            if not isinstance(params, Mapping):  # parameter rows: once per row
                if params:
                    cursor.executemany(sql(name), [_adapt(p) for p in params])
            else:
                cursor.execute(sql(name), _adapt(params))
                if cursor.description:
                    columns = [column[0] for column in cursor.description]
                    rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
            name, params = operation.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        cursor.close()


def run(conn: sqlite3.Connection, operation: Operation[T]) -> T:
    nested = conn.in_transaction
    conn.execute(f"SAVEPOINT {_SAVEPOINT}" if nested else "BEGIN IMMEDIATE")
    try:
        result = _drive(conn, operation)
    except BaseException:
        if conn.in_transaction:
            if nested:
                conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
                conn.execute(f"RELEASE {_SAVEPOINT}")
            else:
                conn.execute("ROLLBACK")
        raise
    conn.execute(f"RELEASE {_SAVEPOINT}" if nested else "COMMIT")
    return result


def run_read(conn: sqlite3.Connection, operation: Operation[T]) -> T:
    """A read-only operation: a deferred transaction, so readers never wait for the writer."""
    if conn.in_transaction:
        return _drive(conn, operation)
    conn.execute("BEGIN")
    try:
        return _drive(conn, operation)
    finally:
        conn.execute("COMMIT")
