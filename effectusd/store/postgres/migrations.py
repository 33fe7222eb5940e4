"""Schema migrations: ordered .sql files, applied under an advisory lock, checksummed.

The files live in ``schema/migrations`` in the source tree and ship inside the wheel as
``effectusd/_migrations``.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import psycopg

from effectusd.store import migration_files
from effectusd.store.migration_files import (
    Migration,
    MigrationError,
    MigrationStatus,
    compare,
    raise_unless_current,
)
from effectusd.store.postgres.queries import sql

__all__ = [
    "Migration",
    "MigrationError",
    "MigrationStatus",
    "known_migrations",
    "migrate",
    "require_current",
    "status",
]


def _migrations_folder() -> Traversable:
    shipped = files("effectusd") / "_migrations"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[3] / "schema" / "migrations"


def known_migrations(folder: Traversable | None = None) -> list[Migration]:
    return migration_files.known_migrations(folder or _migrations_folder())


def status(conn: psycopg.Connection, known: list[Migration] | None = None) -> MigrationStatus:
    known = known if known is not None else known_migrations()
    present = conn.execute(sql("migrations_table_exists")).fetchone()
    applied_rows = (
        conn.execute(sql("migrations_applied")).fetchall() if present and present[0] else []
    )
    return compare(known, applied_rows)


def migrate(conn: psycopg.Connection, known: list[Migration] | None = None) -> list[Migration]:
    """Apply every pending migration, each in its own transaction under the advisory lock."""
    known = known if known is not None else known_migrations()
    applied: list[Migration] = []
    with conn.transaction():
        conn.execute(sql("migrations_lock"))
        conn.execute(sql("migrations_create_table"))
    while True:
        with conn.transaction():
            conn.execute(sql("migrations_lock"))
            current = status(conn, known)
            if current.problems:
                raise MigrationError("; ".join(current.problems))
            if not current.pending:
                return applied
            migration = current.pending[0]
            conn.execute(migration.text.encode("utf-8"))
            conn.execute(
                sql("migrations_record"),
                {
                    "version": migration.version,
                    "name": migration.name,
                    "checksum": migration.checksum,
                },
            )
            applied.append(migration)


def require_current(conn: psycopg.Connection) -> None:
    """Refuse to run against a schema older or newer than this code."""
    raise_unless_current(status(conn))
