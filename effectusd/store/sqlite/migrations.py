"""Schema migrations for SQLite: the same API as ``effectusd.store.postgres.migrations``.

The files live in ``schema/sqlite`` in the source tree and ship inside the wheel as
``effectusd/_sqlite_migrations``. Each migration runs in its own ``BEGIN IMMEDIATE``
transaction: the write lock is what keeps two migrators apart (PostgreSQL's advisory lock), and
SQLite's DDL is transactional, so a migration that fails leaves nothing behind.

``conn`` is a connection from ``effectusd.store.sqlite.connection.connect`` (autocommit mode:
this module opens and ends its transactions itself).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from effectusd.store import migration_files
from effectusd.store.migration_files import (
    Migration,
    MigrationError,
    MigrationStatus,
    compare,
    raise_unless_current,
)
from effectusd.store.sqlite.queries import sql

__all__ = [
    "Migration",
    "MigrationError",
    "MigrationStatus",
    "known_migrations",
    "migrate",
    "require_current",
    "statements",
    "status",
]

_TABLE_EXISTS = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'effectus_schema_migrations'"
)


@contextmanager
def _write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE … COMMIT, or ROLLBACK when the block raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _migrations_folder() -> Traversable:
    shipped = files("effectusd") / "_sqlite_migrations"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[3] / "schema" / "sqlite"


def known_migrations(folder: Traversable | None = None) -> list[Migration]:
    return migration_files.known_migrations(folder or _migrations_folder())


def statements(migration: Migration) -> Iterator[str]:
    """The statements of a migration file, one at a time (a trigger's BEGIN … END is one).

    Lines are gathered until SQLite says they form a complete statement. Never
    ``executescript``: it commits the open transaction on its own.
    """
    pending: list[str] = []
    for line in migration.text.splitlines(keepends=True):
        pending.append(line)
        text = "".join(pending)
        if sqlite3.complete_statement(text):
            yield text
            pending = []
    rest = [line.strip() for line in pending]
    if any(line and not line.startswith("--") for line in rest):
        raise MigrationError(
            f"migration {migration.version}_{migration.name} ends with an incomplete statement"
        )


def _applied_rows(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
    if conn.execute(_TABLE_EXISTS).fetchone() is None:
        return []
    return [(row[0], row[1], row[2]) for row in conn.execute(sql("migrations_applied"))]


def status(conn: sqlite3.Connection, known: list[Migration] | None = None) -> MigrationStatus:
    """What is applied, what is pending, what is wrong. Reads one snapshot; creates nothing."""
    known = known if known is not None else known_migrations()
    if conn.in_transaction:
        return compare(known, _applied_rows(conn))
    conn.execute("BEGIN")
    try:
        return compare(known, _applied_rows(conn))
    finally:
        conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection, known: list[Migration] | None = None) -> list[Migration]:
    """Apply every pending migration, each in its own BEGIN IMMEDIATE transaction."""
    known = known if known is not None else known_migrations()
    if conn.in_transaction:
        raise MigrationError("migrate needs a connection with no transaction open")
    applied: list[Migration] = []
    with _write_transaction(conn):
        conn.execute(sql("migrations_create_table"))
    # SQLite changes a table's constraints only by rebuilding it, which a parent table's
    # foreign keys forbid while they are enforced; the pragma is a no-op inside a
    # transaction, so it is set around them, and each migration checks every key itself.
    enforced = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        while True:
            with _write_transaction(conn):
                current = status(conn, known)
                if current.problems:
                    raise MigrationError("; ".join(current.problems))
                if not current.pending:
                    return applied
                applied.append(_apply(conn, current.pending[0]))
    finally:
        conn.execute(f"PRAGMA foreign_keys = {'ON' if enforced else 'OFF'}")


def _apply(conn: sqlite3.Connection, migration: Migration) -> Migration:
    for statement in statements(migration):
        conn.execute(statement)
    broken = conn.execute("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise MigrationError(
            f"migration {migration.version}_{migration.name} leaves {len(broken)} row(s) with "
            f"a broken foreign key (first in table {broken[0][0]})"
        )
    conn.execute(
        sql("migrations_record"),
        {
            "version": migration.version,
            "name": migration.name,
            "checksum": migration.checksum,
        },
    )
    return migration


def require_current(conn: sqlite3.Connection) -> None:
    """Refuse to run against a schema older or newer than this code."""
    raise_unless_current(status(conn))
