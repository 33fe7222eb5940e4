"""Install the kit's tables into the application's database: ordered, checksummed .sql files
under migrations/ (PostgreSQL) or migrations/sqlite/ (SQLite), applied in one transaction that
only one installer at a time may hold (an advisory lock on PostgreSQL, SQLite's write lock),
so every instance of a service may install at startup and exactly one of them does the work.

Both may run inside the caller's own open transaction (they become a savepoint), so an
application can create its tables and the kit's atomically. A version this code does not know
is a newer kit's, additive, so older code may still run; a file changed after it was applied
is refused. The runners are the backends' (``effectusd.backends.*.migrations``).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from effectusd.backends.connections import (
    AsyncPostgresConnection,
    PostgresConnection,
    SqliteConnection,
)
from effectusd.backends.migrations import Migration, MigrationSet
from effectusd.backends.postgres import migrations as postgres_migrations
from effectusd.backends.sqlite import migrations as sqlite_migrations
from effectusd.core.database_url import Dialect
from effectusd.destination.queries import POSTGRES, SQLITE


class SchemaError(RuntimeError):
    """The kit's tables in this database disagree with the migrations this code ships."""


def _folder(dialect: Dialect) -> Traversable:
    folder = files(__package__) / "migrations"
    return folder / "sqlite" if dialect == "sqlite" else folder


def _set(dialect: Dialect) -> MigrationSet:
    return MigrationSet(
        folder=lambda: _folder(dialect),
        statements=SQLITE if dialect == "sqlite" else POSTGRES,
        table="effectus_dest_migrations",
        create="install_create_migrations_table",
        applied="install_applied",
        record="install_record",
        lock=None if dialect == "sqlite" else "install_lock",
        tolerate_newer=True,
        label="destination kit migration",
        error=SchemaError,
    )


POSTGRES_SET = _set("postgresql")
SQLITE_SET = _set("sqlite")
SCHEMAS: dict[Dialect, MigrationSet] = {"postgresql": POSTGRES_SET, "sqlite": SQLITE_SET}


@cache
def migrations(dialect: Dialect = "postgresql") -> tuple[Migration, ...]:
    return tuple(SCHEMAS[dialect].known())


def install_sync(conn: PostgresConnection) -> list[int]:
    """Create or upgrade the kit's tables; returns the versions applied now (often none)."""
    return postgres_migrations.install(conn, POSTGRES_SET)


async def install(conn: AsyncPostgresConnection) -> list[int]:
    """Async ``install_sync``."""
    return await postgres_migrations.install_async(conn, POSTGRES_SET)


def install_sqlite(conn: SqliteConnection) -> list[int]:
    """``install_sync`` for SQLite: BEGIN IMMEDIATE holds the database's only write lock, so
    instances starting together install one after the other, the later ones finding nothing
    to do. Inside the caller's open transaction it runs as a savepoint."""
    if not conn.in_transaction:
        require_own_transaction(conn, "write_transaction")
    return sqlite_migrations.install(conn, SQLITE_SET, "effectus_install")


def require_own_transaction(conn: SqliteConnection, who: str) -> None:
    if conn.isolation_level is not None:
        raise ValueError(
            f"{who}: open the connection with isolation_level=None (connect_sqlite does); "
            "the kit begins its own transactions"
        )
    if conn.in_transaction:
        # The reply promises "committed"; only a transaction we begin and end can keep that.
        raise ValueError(f"{who} owns the transaction: pass a connection outside one")
