"""The SQLite backend: the embedded default for one machine. It owns every use of sqlite3;
it runs the statements of the schema it is handed (the store's: effectusd.store.sql).

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
from pathlib import Path
from typing import TypeVar

from effectusd.backends.changes import AsyncPolling, Polling
from effectusd.backends.connections import require_async_connection, require_connection
from effectusd.backends.errors import schema_checked
from effectusd.backends.migrations import MigrationSet
from effectusd.backends.operation import Operation
from effectusd.backends.sqlite import runner as sqlite_runner
from effectusd.backends.sqlite.connection import connect
from effectusd.backends.sqlite.migrations import SqliteMigrator
from effectusd.backends.sqlite.session import ThreadSession
from effectusd.backends.sqlite.transaction import atomic, write_transaction
from effectusd.backends.statements import Statements
from effectusd.core.database_url import Dialect, SqliteDatabase

T = TypeVar("T")

__all__ = [
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


class SqliteRunner:
    """Runs the store's operations on SQLite: on connections of its own or the caller's; in a
    worker thread when asked asynchronously (there is no async SQLite connection or pool)."""

    dialect: Dialect = "sqlite"

    def __init__(self, path: Path, statements: Statements) -> None:
        self.path = path
        self.statements = statements

    @contextmanager
    def connect(self, *, create: bool = False) -> Iterator[sqlite3.Connection]:
        """An autocommit connection, closed afterwards. ``create``: the file may be created
        (only ``migrate`` does that)."""
        conn = connect(self.path, create=create)
        try:
            yield conn
        finally:
            conn.close()

    def run(self, conn: sqlite3.Connection, operation: Operation[T]) -> T:
        """Run a store operation in one transaction (a savepoint inside an open one)."""
        with schema_checked():
            return sqlite_runner.run(conn, operation, self.statements)

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

    async def run_joined_async(self, conn: object, operation: Operation[T]) -> T:
        require_async_connection(self.dialect, conn)  # raises: no async SQLite connection
        raise AssertionError("unreachable")  # pragma: no cover

    def check_writable(self, conn: sqlite3.Connection) -> None:
        """Nothing to check: a SQLite file has no standby, and one we cannot write fails the
        write itself."""

    def watch_replication(self, *, require_synchronous: bool) -> None:
        """None: a SQLite file has no standby to fail over to."""
        return None

    async def open_session(self, min_size: int, max_size: int) -> ThreadSession:
        """One connection in one worker thread (the pool sizes are PostgreSQL's)."""
        return ThreadSession(self.path, self.statements)


class SqliteNotifications:
    """None: SQLite cannot tell another connection anything, so the daemon and a wait poll
    (a cheap indexed read)."""

    poll_interval_s: float = 0.05
    notifies: bool = False  # wakeups() never yields

    def saga_changes(self) -> AbstractContextManager[Polling]:
        """A wait looks again every poll interval."""
        return nullcontext(Polling(self.poll_interval_s))

    def saga_changes_async(self) -> AbstractAsyncContextManager[AsyncPolling]:
        return nullcontext(AsyncPolling(self.poll_interval_s))

    async def wakeups(self) -> AsyncGenerator[None, None]:
        """None ever (``notifies`` is False; the daemon polls)."""
        return
        yield  # unreachable; makes this an async generator


class SqliteBackend:
    dialect: Dialect = "sqlite"

    def __init__(self, url: str, database: SqliteDatabase, schema: MigrationSet) -> None:
        self.url = url
        self.path = database.path
        self.runner = SqliteRunner(self.path, schema.statements)
        self.notifications = SqliteNotifications()
        self.migrator = SqliteMigrator(schema)
