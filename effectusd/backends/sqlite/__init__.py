"""The SQLite backend: the embedded default for one machine. It owns every use of sqlite3;
the store's statements are store/sqlite/queries.

Conventions every statement of the store and the kit follows (see connection.py):
timestamps are REAL Unix seconds (declared ``TIMESTAMP_REAL``), JSON is text (``JSON_TEXT``),
booleans are 0/1 (``BOOLEAN``); a computed column names its type, ``AS "x [timestamp_real]"``,
so it reads back as the same Python type the PostgreSQL store returns. A list parameter
arrives as JSON text and is read with ``json_each``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    contextmanager,
    nullcontext,
)
from typing import TypeVar

from effectusd.backends.base import StoreBackend, store_migrations
from effectusd.backends.changes import AsyncPolling, Polling
from effectusd.backends.connections import require_async_connection, require_connection
from effectusd.backends.operation import Operation
from effectusd.backends.sqlite import migrations as sqlite_migrations
from effectusd.backends.sqlite import runner as sqlite_runner
from effectusd.backends.sqlite.connection import connect
from effectusd.backends.sqlite.session import ThreadSession
from effectusd.backends.sqlite.transaction import atomic, write_transaction
from effectusd.backends.statements import Statements
from effectusd.core.database_url import Dialect, SqliteDatabase

T = TypeVar("T")

__all__ = [
    "STORE_MIGRATIONS",
    "STORE_STATEMENTS",
    "Error",
    "OperationalError",
    "SqliteBackend",
    "atomic",
    "version",
    "version_info",
    "write_transaction",
]

Error = sqlite3.Error
OperationalError = sqlite3.OperationalError


def version_info() -> tuple[int, int, int]:
    """The version of the SQLite library this Python's sqlite3 links."""
    return sqlite3.sqlite_version_info


def version() -> str:
    return sqlite3.sqlite_version


STORE_STATEMENTS = Statements("effectusd.store.sqlite", "queries")


STORE_MIGRATIONS = store_migrations(STORE_STATEMENTS, "sqlite")


class SqliteBackend(StoreBackend):
    dialect: Dialect = "sqlite"
    # No notifications: the daemon polls (a cheap indexed read).
    poll_interval_s: float = 0.05
    notifies: bool = False  # wakeups() yields on each NOTIFY
    runner = sqlite_runner
    migrator = sqlite_migrations
    statements = STORE_STATEMENTS
    migrations = STORE_MIGRATIONS

    def __init__(self, url: str, database: SqliteDatabase) -> None:
        self.url = url
        self.path = database.path

    @contextmanager
    def connect(self, *, create: bool = False) -> Iterator[sqlite3.Connection]:
        """An autocommit connection, closed afterwards. ``create``: the file may be created
        (only ``migrate`` does that)."""
        conn = connect(self.path, create=create)
        try:
            yield conn
        finally:
            conn.close()

    def join(self, conn: object, who: str = "Client") -> None:
        """Refuse a connection of the wrong kind; open its transaction, to write inside it."""
        require_connection(self.dialect, conn, who)
        assert isinstance(conn, sqlite3.Connection)
        sqlite_runner.join_transaction(conn)

    @contextmanager
    def borrow(self, source: object | None = None) -> Iterator[sqlite3.Connection]:
        """A connection to run on: the caller's (``source``) or one of our own."""
        if source is None:
            with self.connect() as conn:
                yield conn
        else:
            require_connection(self.dialect, source)
            assert isinstance(source, sqlite3.Connection)
            yield source

    async def run_async(self, operation: Operation[T], source: object | None = None) -> T:
        """Run a store operation on a connection of its own, in a worker thread (there is no
        async SQLite connection or pool to take instead)."""
        if source is not None:
            require_async_connection(self.dialect, source)  # raises: it is not one

        def in_thread() -> T:
            with self.connect() as conn:
                return self.run(conn, operation)

        return await asyncio.to_thread(in_thread)

    def saga_changes(self) -> AbstractContextManager[Polling]:
        """No notifications on SQLite: a wait looks again every poll interval."""
        return nullcontext(Polling(self.poll_interval_s))

    def saga_changes_async(self) -> AbstractAsyncContextManager[AsyncPolling]:
        return nullcontext(AsyncPolling(self.poll_interval_s))

    async def run_joined_async(self, conn: object, operation: Operation[T]) -> T:
        require_async_connection(self.dialect, conn)  # raises: no async SQLite connection
        raise AssertionError("unreachable")  # pragma: no cover

    async def wakeups(self) -> AsyncGenerator[None, None]:
        """None ever: SQLite has no notifications (``notifies`` is False; the daemon polls)."""
        return
        yield  # unreachable; makes this an async generator

    async def open_session(self, min_size: int, max_size: int) -> ThreadSession:
        """One connection in one worker thread (the pool sizes are PostgreSQL's)."""
        return ThreadSession(self.path, self.statements)
