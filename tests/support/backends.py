"""Store access for tests, by URL or by connection, on top of ``effectusd.backends``: tests
hold a connection and often not its URL, so the backend is picked by the connection's kind."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from effectusd.backends import Connection
from effectusd.backends.base import StoreMigrator
from effectusd.backends.errors import UNAVAILABLE, schema_checked
from effectusd.backends.migrations import Migration, known_migrations
from effectusd.backends.operation import Operation
from effectusd.backends.postgres import runner as pg_runner
from effectusd.backends.postgres.migrations import PostgresMigrator
from effectusd.backends.sqlite import runner as sqlite_runner
from effectusd.backends.sqlite.migrations import SqliteMigrator
from effectusd.core.database_url import SqliteDatabase, parse_database_url
from effectusd.store.sql import POSTGRES_MIGRATIONS as PG_MIGRATIONS
from effectusd.store.sql import SQLITE_MIGRATIONS, store_backend

__all__ = ["UNAVAILABLE", "Connection", "connection", "is_sqlite", "migrate", "run", "sqlite_path"]

T = TypeVar("T")


def connection(url: str, *, create: bool = False) -> AbstractContextManager[Any]:
    return store_backend(url).runner.connect(create=create)


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
        return sqlite_store_migrations.migrate(conn)
    return postgres_store_migrations.migrate(conn)


class StoreMigrations:
    """The store's migrator of one dialect, and the files it knows (of another folder, e.g. a
    wheel's, when given one)."""

    def __init__(self, migrator: StoreMigrator) -> None:
        self.migrator = migrator
        self.status = migrator.status
        self.migrate = migrator.migrate
        self.require_current = migrator.require_current

    def known_migrations(self, folder: Any = None) -> list[Migration]:
        return known_migrations(folder if folder is not None else self.migrator.migrations.folder())


postgres_store_migrations = StoreMigrations(PostgresMigrator(PG_MIGRATIONS))
sqlite_store_migrations = StoreMigrations(SqliteMigrator(SQLITE_MIGRATIONS))


def postgres_query_names() -> list[str]:
    return sorted(PG_MIGRATIONS.statements.names())


def sqlite_query_names() -> list[str]:
    return sorted(SQLITE_MIGRATIONS.statements.names())


def postgres_sql(name: str) -> Any:
    """The store's PostgreSQL statement ``name`` as psycopg runs it."""
    return pg_runner.sql(PG_MIGRATIONS.statements, name)


def sqlite_sql(name: str) -> str:
    return SQLITE_MIGRATIONS.statements.text(name)  # type: ignore[no-any-return]


# The columns whose 64-hex rule is the domain effectus_hex64's since migration 10022.
HEX_DOMAIN_COLUMNS = (
    ("effectus_saga_outbox", "args_hash"),
    ("effectus_saga_outbox", "contract_hash"),
    ("effectus_saga_outbox", "idempotency_key"),
    ("effectus_saga_instances", "plan_digest"),
    ("effectus_saga_instances", "facts_hash"),
    ("effectus_saga_steps", "args_hash"),
    ("effectus_saga_steps", "contract_hash"),
)
