"""Store access for tests, by URL or by connection, on top of ``effectusd.backends``: tests
hold a connection and often not its URL, so the backend is picked by the connection's kind."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from effectusd.backends import Connection, backend_for
from effectusd.backends.errors import UNAVAILABLE, schema_checked
from effectusd.backends.migrations import (
    Migration,
    MigrationStatus,
    known_migrations,
    raise_unless_current,
)
from effectusd.backends.operation import Operation
from effectusd.backends.postgres import STORE_MIGRATIONS as PG_MIGRATIONS
from effectusd.backends.postgres import migrations as pg_migrations
from effectusd.backends.postgres import runner as pg_runner
from effectusd.backends.sqlite import STORE_MIGRATIONS as SQLITE_MIGRATIONS
from effectusd.backends.sqlite import migrations as sqlite_migrations
from effectusd.backends.sqlite import runner as sqlite_runner
from effectusd.core.database_url import SqliteDatabase, parse_database_url

__all__ = ["UNAVAILABLE", "Connection", "connection", "is_sqlite", "migrate", "run", "sqlite_path"]

T = TypeVar("T")


def connection(url: str, *, create: bool = False) -> AbstractContextManager[Any]:
    return backend_for(url).connect(create=create)


def is_sqlite(url: str) -> bool:
    return isinstance(parse_database_url(url), SqliteDatabase)


def sqlite_path(url: str) -> Path:
    database = parse_database_url(url)
    assert isinstance(database, SqliteDatabase), "not a SQLite URL"
    return database.path


def run(conn: Any, operation: Operation[T]) -> T:
    """The store operation in one transaction on ``conn``, as the client runs it."""
    with schema_checked():
        if isinstance(conn, sqlite3.Connection):
            return sqlite_runner.run(conn, operation, SQLITE_MIGRATIONS.statements)
        return pg_runner.run(conn, operation, PG_MIGRATIONS.statements)


def migrate(conn: Any) -> list[Migration]:
    """Apply the store's pending migrations on ``conn``."""
    if isinstance(conn, sqlite3.Connection):
        return sqlite_migrations.migrate(conn, SQLITE_MIGRATIONS)
    return pg_migrations.migrate(conn, PG_MIGRATIONS)


class StoreMigrations:
    """The store's migration set of one dialect, as functions of a connection."""

    def __init__(self, module: Any, mset: Any) -> None:
        self.module = module
        self.mset = mset

    def known_migrations(self, folder: Any = None) -> list[Migration]:
        return known_migrations(folder if folder is not None else self.mset.folder())

    def status(self, conn: Any, known: list[Migration] | None = None) -> MigrationStatus:
        return self.module.status(conn, self.mset, known)  # type: ignore[no-any-return]

    def migrate(self, conn: Any, known: list[Migration] | None = None) -> list[Migration]:
        return self.module.migrate(conn, self.mset, known)  # type: ignore[no-any-return]

    def require_current(self, conn: Any) -> None:
        raise_unless_current(self.status(conn))


postgres_store_migrations = StoreMigrations(pg_migrations, PG_MIGRATIONS)
sqlite_store_migrations = StoreMigrations(sqlite_migrations, SQLITE_MIGRATIONS)


def postgres_query_names() -> list[str]:
    return sorted(PG_MIGRATIONS.statements.names())


def sqlite_query_names() -> list[str]:
    return sorted(SQLITE_MIGRATIONS.statements.names())


def postgres_sql(name: str) -> Any:
    """The store's PostgreSQL statement ``name`` as psycopg runs it."""
    return pg_runner.sql(PG_MIGRATIONS.statements, name)


def sqlite_sql(name: str) -> str:
    return SQLITE_MIGRATIONS.statements.text(name)  # type: ignore[no-any-return]
