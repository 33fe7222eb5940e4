"""The one SQLite transaction helper, for the store, the migrations and the destination kit.

Writers take the file's write lock up front (``BEGIN IMMEDIATE``): a transaction that read
first and wrote later could otherwise fail with SQLITE_BUSY instead of waiting its turn, and
holding the lock for the whole transaction is what makes each guarded read-then-write a
compare-and-set. Inside the caller's open transaction the work is a savepoint of it instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; ROLLBACK if the block raises or COMMIT fails."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        # A COMMIT refused with SQLITE_BUSY leaves the transaction open; end it, undone.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextmanager
def atomic(conn: sqlite3.Connection, name: str = "effectus_atomic") -> Iterator[None]:
    """A savepoint inside the caller's open transaction, else a ``write_transaction``."""
    if not conn.in_transaction:
        with write_transaction(conn):
            yield
        return
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """A deferred transaction (one snapshot; readers never wait for the writer), unless the
    caller has one open already."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")
