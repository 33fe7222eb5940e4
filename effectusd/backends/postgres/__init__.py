"""The PostgreSQL backend: the production store, the only one for several machines. It owns
every use of psycopg and psycopg_pool; it runs the statements of the schema it is handed (the
store's: effectusd.store.sql)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from effectusd.backends.changes import AsyncSagaChanges
from effectusd.backends.connections import (
    require_async_connection,
    require_connection,
)
from effectusd.backends.errors import schema_checked
from effectusd.backends.migrations import MigrationSet
from effectusd.backends.operation import Operation
from effectusd.backends.postgres import runner as postgres_runner
from effectusd.backends.postgres.hosts import primary_conninfo
from effectusd.backends.postgres.migrations import PostgresMigrator
from effectusd.backends.postgres.replication import ReplicationWatch, server_of
from effectusd.backends.postgres.session import (
    PoolSession,
    SagaListener,
    async_saga_listener,
    notifications,
    saga_listener,
)
from effectusd.backends.statements import Statements
from effectusd.core.database_url import Dialect, PostgresDatabase
from effectusd.core.replication import require_writable

T = TypeVar("T")


def connect(conninfo: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    """A plain connection (use it as a context manager). ``autocommit=False``: the caller's
    own transactions, committed by the caller (or on leaving the ``with`` block)."""
    return psycopg.connect(conninfo, autocommit=autocommit)


def with_database(conninfo: str, dbname: str) -> str:
    """``conninfo`` naming the database ``dbname`` on the same server."""
    return psycopg.conninfo.make_conninfo(conninfo, dbname=dbname)


def database_name(conninfo: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(conninfo)["dbname"])


def connection_keywords(conninfo: str) -> dict[str, str]:
    """A URL or conninfo string as keywords (``dbname`` → ``database``), for a driver that
    takes neither (asyncpg, which bench-peers' peer uses)."""
    keywords = {
        key: str(value) for key, value in psycopg.conninfo.conninfo_to_dict(conninfo).items()
    }
    if "dbname" in keywords:
        keywords["database"] = keywords.pop("dbname")
    return keywords


class PostgresRunner:
    """Runs the store's operations on PostgreSQL: on connections of its own, the caller's
    connection or pool, or a pool for the daemon (``open_session``)."""

    dialect: Dialect = "postgresql"

    def __init__(self, conninfo: str, statements: Statements) -> None:
        self.conninfo = conninfo
        self.statements = statements
        self.replication: ReplicationWatch | None = None

    def watch_replication(self, *, require_synchronous: bool) -> ReplicationWatch:
        """From now on every connection of ``open_session``'s pool reads its server's
        replication settings into the watch, which refuses a standby (and, if required, a
        server without synchronous replication): the daemon's view of its server."""
        self.replication = ReplicationWatch(require_synchronous=require_synchronous)
        return self.replication

    @contextmanager
    def connect(self, *, create: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """An autocommit connection, closed afterwards (``create`` is SQLite's: ignored)."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            yield conn

    def check_writable(self, conn: psycopg.Connection[Any]) -> None:
        """ReadOnlyServer if ``conn``'s server takes no writes: the daemon's check, for a
        command that writes."""
        require_writable(server_of(conn))

    def run(self, conn: psycopg.Connection[Any], operation: Operation[T]) -> T:
        """Run a store operation in one transaction (a savepoint inside an open one)."""
        with schema_checked():
            return postgres_runner.run(conn, operation, self.statements)

    def join(self, conn: object, who: str = "Client") -> None:
        """Refuse a connection of the wrong kind; open its transaction, to write inside it."""
        require_connection(self.dialect, conn, who)
        assert isinstance(conn, psycopg.Connection)
        postgres_runner.join_transaction(conn, self.statements)

    @contextmanager
    def borrow(self, source: object | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A connection to run on: the caller's (``source``), one of the caller's pool, or one
        of our own for the duration."""
        if source is None:
            with self.connect() as conn:
                yield conn
        elif isinstance(source, ConnectionPool):
            with source.connection() as conn:
                yield conn
        else:
            require_connection(self.dialect, source)
            assert isinstance(source, psycopg.Connection)
            yield source

    async def run_async(self, operation: Operation[T], source: object | None = None) -> T:
        """Run a store operation asynchronously in a transaction of its own: on a connection
        of the caller's pool (``source``), on the caller's connection, or on one we open."""
        if isinstance(source, AsyncConnectionPool):
            async with source.connection() as conn:
                return await self._run_on(conn, operation)
        if source is not None:
            require_async_connection(self.dialect, source)
            assert isinstance(source, psycopg.AsyncConnection)
            return await self._run_on(source, operation)
        async with await psycopg.AsyncConnection.connect(self.conninfo) as conn:
            return await self._run_on(conn, operation)

    async def _run_on(self, conn: psycopg.AsyncConnection[Any], operation: Operation[T]) -> T:
        with schema_checked():
            return await postgres_runner.run_async(conn, operation, self.statements)

    async def run_joined_async(self, conn: object, operation: Operation[T]) -> T:
        """Run a store operation inside the caller's async connection's transaction."""
        require_async_connection(self.dialect, conn)
        assert isinstance(conn, psycopg.AsyncConnection)
        await postgres_runner.join_transaction_async(conn, self.statements)
        with schema_checked():
            return await postgres_runner.run_async(conn, operation, self.statements)

    async def open_session(self, min_size: int, max_size: int) -> PoolSession:
        return await PoolSession.open(
            self.conninfo, self.statements, min_size, max_size, self.replication
        )


class PostgresNotifications:
    """LISTEN/NOTIFY, each listener on a connection of its own."""

    poll_interval_s: float = 1.0  # LISTEN/NOTIFY wakes the daemon; polling is backup
    notifies: bool = True  # wakeups() yields on each NOTIFY

    def __init__(self, conninfo: str, statements: Statements) -> None:
        self.conninfo = conninfo
        self.statements = statements

    def wakeups(self) -> AsyncGenerator[None, None]:
        """LISTEN for the outbox's notifications."""
        return notifications(self.conninfo, self.statements, "listen_outbox")

    def saga_changes(self) -> AbstractContextManager[SagaListener]:
        """A LISTEN connection of its own that wakes when a saga's state changed."""
        return saga_listener(self.conninfo, self.statements)

    def saga_changes_async(self) -> AbstractAsyncContextManager[AsyncSagaChanges]:
        return async_saga_listener(self.conninfo, self.statements)


class PostgresBackend:
    dialect: Dialect = "postgresql"

    def __init__(self, url: str, database: PostgresDatabase, schema: MigrationSet) -> None:
        self.url = url
        self.conninfo = primary_conninfo(database)  # several hosts: the writable one
        self.runner = PostgresRunner(self.conninfo, schema.statements)
        self.notifications = PostgresNotifications(self.conninfo, schema.statements)
        self.migrator = PostgresMigrator(schema)
