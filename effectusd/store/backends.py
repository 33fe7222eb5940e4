"""Which store a database URL names, and the pieces that differ per store.

``postgresql://…`` (or ``postgres://…``) is PostgreSQL: the production store, the only one
for several machines. ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` is a
SQLite file: the embedded default for one machine (``sqlite:///effectusd.db``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors

from effectusd.core.database_url import DatabaseURLError, SqliteDatabase, parse_database_url
from effectusd.core.errors import SchemaNotReady, WrongConnection
from effectusd.store.operations import Operation
from effectusd.store.postgres import migrations as pg_migrations
from effectusd.store.postgres import runner as pg_runner
from effectusd.store.sqlite import migrations as sqlite_migrations
from effectusd.store.sqlite import runner as sqlite_runner
from effectusd.store.sqlite.connection import connect as sqlite_connect

T = TypeVar("T")

# What a store raises when the database is unreachable or refuses: retried, never a crash.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (psycopg.Error, sqlite3.Error, OSError)
# Failures that say nothing about the work itself (connection lost, server shutting down,
# deadlock or serialization failure, disk full, lock timeout): the same write is retried.
# Anything else a write raises is taken as deterministic, a property of the rows it writes.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    sqlite3.OperationalError,
    OSError,
    TimeoutError,
)


# What "cannot reach / open the database" looks like, for the CLI's exit code 1.
UNAVAILABLE: tuple[type[BaseException], ...] = (psycopg.OperationalError, sqlite3.OperationalError)
MIGRATE = "run `effectusd migrate`"

Connection = psycopg.Connection[Any] | sqlite3.Connection


def is_sqlite(url: str) -> bool:
    return isinstance(parse_database_url(url), SqliteDatabase)


def sqlite_path(url: str) -> str:
    """``sqlite:///x.db`` → ``x.db``; ``sqlite:////var/x.db`` → ``/var/x.db``."""
    database = parse_database_url(url)
    if not isinstance(database, SqliteDatabase):
        raise DatabaseURLError("not a SQLite database URL")
    return str(database.path)


def check_url(url: str) -> str:
    """The URL if some store understands it, else DatabaseURLError naming what is wrong."""
    parse_database_url(url)
    return url


@contextmanager
def connection(url: str, *, create: bool = False) -> Iterator[Connection]:
    """A connection in autocommit mode, closed afterwards. ``create``: a SQLite file may be
    created (only ``migrate`` does that)."""
    if is_sqlite(check_url(url)):
        conn = sqlite_connect(sqlite_path(url), create=create)
        try:
            yield conn
        finally:
            conn.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            yield pg


def schema_missing(exc: BaseException) -> SchemaNotReady | None:
    """The SchemaNotReady a store error means, if it is a table the migrations create."""
    if isinstance(exc, pg_errors.UndefinedTable):
        detail = exc.diag.message_primary or "a table is missing"
    elif isinstance(exc, sqlite3.OperationalError) and str(exc).startswith("no such table"):
        detail = str(exc)
    else:
        return None
    return SchemaNotReady(
        f"the database has no effectusd schema or an older one ({detail}): {MIGRATE}"
    )


@contextmanager
def schema_checked() -> Iterator[None]:
    """Turn "no such table" into SchemaNotReady, which tells the reader to migrate."""
    try:
        yield
    except (pg_errors.UndefinedTable, sqlite3.OperationalError) as exc:
        missing = schema_missing(exc)
        if missing is None:
            raise
        raise missing from exc


def require_store(url: str, conn: object, who: str = "Client") -> None:
    """Refuse a connection of the other store than ``url`` names, or of the wrong kind."""
    sqlite = is_sqlite(url)
    if isinstance(conn, sqlite3.Connection if sqlite else psycopg.Connection):
        return
    store, wanted = (
        ("SQLite", "sqlite3.Connection") if sqlite else ("PostgreSQL", "psycopg.Connection")
    )
    hint = (
        "; AsyncClient takes a psycopg.AsyncConnection"
        if isinstance(conn, psycopg.AsyncConnection)
        else ""
    )
    raise WrongConnection(
        f"{who} is configured for the {store} store (database URL) and joins a {wanted}'s "
        f"transaction, not a {type(conn).__module__}.{type(conn).__name__}{hint}"
    )


def join_transaction(conn: Connection) -> None:
    if isinstance(conn, sqlite3.Connection):
        sqlite_runner.join_transaction(conn)
    else:
        pg_runner.join_transaction(conn)


def migrations_of(conn: Connection) -> ModuleType:
    """The migrations module of the connection's store (same API on both)."""
    return sqlite_migrations if isinstance(conn, sqlite3.Connection) else pg_migrations


def run(conn: Connection, operation: Operation[T]) -> T:
    """Run a store operation in one transaction (a savepoint inside an open one)."""
    with schema_checked():
        if isinstance(conn, sqlite3.Connection):
            return sqlite_runner.run(conn, operation)
        return pg_runner.run(conn, operation)
