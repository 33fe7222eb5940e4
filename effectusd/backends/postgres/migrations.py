"""Applies a migration set (``effectusd.backends.migrations``) on PostgreSQL, under the set's
advisory lock. The store's set: each file in its own transaction (``migrate``); the kit's:
everything in one transaction, or a savepoint of the caller's (``install``)."""

from __future__ import annotations

from typing import Any

import psycopg

from effectusd.backends.base import StoreMigrator
from effectusd.backends.migrations import Migration, MigrationError, MigrationSet, MigrationStatus
from effectusd.backends.postgres.runner import sql


def _execute(conn: psycopg.Connection[Any], mset: MigrationSet, name: str | None) -> None:
    if name is not None:
        conn.execute(sql(mset.statements, name))


def _applied_rows(conn: psycopg.Connection[Any], mset: MigrationSet) -> list[tuple[Any, ...]]:
    return conn.execute(sql(mset.statements, mset.applied)).fetchall()


def status(
    conn: psycopg.Connection[Any], mset: MigrationSet, known: list[Migration] | None = None
) -> MigrationStatus:
    """What is applied, what is pending, what is wrong. Creates nothing."""
    known = known if known is not None else mset.known()
    present = True
    if mset.exists is not None:
        row = conn.execute(sql(mset.statements, mset.exists)).fetchone()
        present = bool(row and row[0])
    return mset.compare(known, _applied_rows(conn, mset) if present else [])


def _apply(conn: psycopg.Connection[Any], mset: MigrationSet, migration: Migration) -> None:
    conn.execute(migration.text.encode("utf-8"))  # our own file, not user input
    conn.execute(sql(mset.statements, mset.record), migration.record())


def migrate(
    conn: psycopg.Connection[Any], mset: MigrationSet, known: list[Migration] | None = None
) -> list[Migration]:
    """Apply every pending migration, each in its own transaction under the lock."""
    known = known if known is not None else mset.known()
    applied: list[Migration] = []
    with conn.transaction():
        _execute(conn, mset, mset.lock)
        _execute(conn, mset, mset.create)
    while True:
        with conn.transaction():
            _execute(conn, mset, mset.lock)
            current = status(conn, mset, known)
            if current.problems:
                raise MigrationError("; ".join(current.problems))
            if not current.pending:
                return applied
            _apply(conn, mset, current.pending[0])
            applied.append(current.pending[0])


def install(conn: psycopg.Connection[Any], mset: MigrationSet) -> list[int]:
    """Apply every pending migration in one transaction (a savepoint inside the caller's);
    returns the versions applied now (often none)."""
    with conn.transaction():
        _execute(conn, mset, mset.lock)
        _execute(conn, mset, mset.create)
        pending = mset.pending(mset.known(), _applied_rows(conn, mset))
        for migration in pending:
            _apply(conn, mset, migration)
    return [migration.version for migration in pending]


async def install_async(conn: psycopg.AsyncConnection[Any], mset: MigrationSet) -> list[int]:
    """``install`` on an async connection."""
    statements = mset.statements
    async with conn.transaction():
        for name in (mset.lock, mset.create):
            if name is not None:
                await conn.execute(sql(statements, name))
        applied = await (await conn.execute(sql(statements, mset.applied))).fetchall()
        pending = mset.pending(mset.known(), applied)
        for migration in pending:
            await conn.execute(migration.text.encode("utf-8"))  # our own file, not user input
            await conn.execute(sql(statements, mset.record), migration.record())
    return [migration.version for migration in pending]


class PostgresMigrator(StoreMigrator):
    """The store's schema on PostgreSQL (``migrate``: each file in its own transaction)."""

    def status(
        self, conn: psycopg.Connection[Any], known: list[Migration] | None = None
    ) -> MigrationStatus:
        return status(conn, self.migrations, known)

    def migrate(
        self, conn: psycopg.Connection[Any], known: list[Migration] | None = None
    ) -> list[Migration]:
        return migrate(conn, self.migrations, known)
