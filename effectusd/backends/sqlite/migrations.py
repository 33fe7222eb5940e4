"""Applies a migration set (``effectusd.backends.migrations``) on SQLite.

The store's set: each file in its own ``BEGIN IMMEDIATE`` transaction (``migrate``): the write
lock is what keeps two migrators apart (PostgreSQL's advisory lock), and SQLite's DDL is
transactional, so a migration that fails leaves nothing behind. The kit's set: everything in
one transaction, or a savepoint of the caller's (``install``).

``conn`` is an autocommit connection (``isolation_level=None``): this module opens and ends
its transactions itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from effectusd.backends.base import StoreMigrator
from effectusd.backends.migrations import Migration, MigrationError, MigrationSet, MigrationStatus
from effectusd.backends.sqlite.transaction import atomic, read_transaction, write_transaction
from effectusd.backends.statements import Statements

STATEMENTS = Statements("effectusd", "sql/sqlite/backend")


def statements(migration: Migration, mset: MigrationSet | None = None) -> Iterator[str]:
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
        label, error = (mset.label, mset.error) if mset else ("migration", MigrationError)
        raise error(
            f"{label} {migration.version}_{migration.name} ends with an incomplete statement"
        )


def _applied_rows(conn: sqlite3.Connection, mset: MigrationSet) -> list[tuple[int, str, str]]:
    if conn.execute(STATEMENTS.text("table_exists"), {"name": mset.table}).fetchone() is None:
        return []
    rows = conn.execute(mset.statements.text(mset.applied))
    return [(row[0], row[1], row[2]) for row in rows]


def status(
    conn: sqlite3.Connection, mset: MigrationSet, known: list[Migration] | None = None
) -> MigrationStatus:
    """What is applied, what is pending, what is wrong. Reads one snapshot; creates nothing."""
    known = known if known is not None else mset.known()
    with read_transaction(conn):
        return mset.compare(known, _applied_rows(conn, mset))


def migrate(
    conn: sqlite3.Connection, mset: MigrationSet, known: list[Migration] | None = None
) -> list[Migration]:
    """Apply every pending migration, each in its own BEGIN IMMEDIATE transaction."""
    known = known if known is not None else mset.known()
    if conn.in_transaction:
        raise MigrationError("migrate needs a connection with no transaction open")
    applied: list[Migration] = []
    with write_transaction(conn):
        conn.execute(mset.statements.text(mset.create))
    # SQLite changes a table's constraints only by rebuilding it, which a parent table's
    # foreign keys forbid while they are enforced; the pragma is a no-op inside a
    # transaction, so it is set around them, and each migration checks every key itself.
    enforced = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        while True:
            with write_transaction(conn):
                current = status(conn, mset, known)
                if current.problems:
                    raise MigrationError("; ".join(current.problems))
                if not current.pending:
                    return applied
                applied.append(_apply(conn, mset, current.pending[0], check_keys=True))
    finally:
        conn.execute(f"PRAGMA foreign_keys = {'ON' if enforced else 'OFF'}")


def _apply(
    conn: sqlite3.Connection, mset: MigrationSet, migration: Migration, *, check_keys: bool
) -> Migration:
    for statement in statements(migration, mset):
        conn.execute(statement)  # our own file, not user input
    broken = conn.execute("PRAGMA foreign_key_check").fetchall() if check_keys else []
    if broken:
        raise MigrationError(
            f"migration {migration.version}_{migration.name} leaves {len(broken)} row(s) with "
            f"a broken foreign key (first in table {broken[0][0]})"
        )
    conn.execute(mset.statements.text(mset.record), migration.record())
    return migration


def install(conn: sqlite3.Connection, mset: MigrationSet, savepoint: str) -> list[int]:
    """Apply every pending migration in one transaction: BEGIN IMMEDIATE holds the database's
    only write lock, so installers starting together run one after the other, the later ones
    finding nothing to do. Inside the caller's open transaction it is a savepoint."""
    with atomic(conn, savepoint):
        conn.execute(mset.statements.text(mset.create))
        pending = mset.pending(mset.known(), _applied_rows(conn, mset))
        for migration in pending:
            _apply(conn, mset, migration, check_keys=False)
    return [migration.version for migration in pending]


class SqliteMigrator(StoreMigrator):
    """The store's schema on SQLite (``migrate``: each file in its own BEGIN IMMEDIATE)."""

    def status(
        self, conn: sqlite3.Connection, known: list[Migration] | None = None
    ) -> MigrationStatus:
        return status(conn, self.migrations, known)

    def migrate(
        self, conn: sqlite3.Connection, known: list[Migration] | None = None
    ) -> list[Migration]:
        return migrate(conn, self.migrations, known)
