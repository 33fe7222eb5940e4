"""Install the kit's tables into the application's database: ordered, checksummed .sql files
under migrations/ (PostgreSQL) or migrations/sqlite/ (SQLite), applied in one transaction that
only one installer at a time may hold (an advisory lock on PostgreSQL, SQLite's write lock),
so every instance of a service may install at startup and exactly one of them does the work.

Both may run inside the caller's own open transaction (they become a savepoint), so an
application can create its tables and the kit's atomically.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

import psycopg
from psycopg import sql as psql

from effectusd.core.database_url import Dialect
from effectusd.destination.queries import sql, sqlite_sql
from effectusd.destination.sqlite import atomic

_FILE = re.compile(r"(\d+)_([a-z0-9_]+)\.sql")


class SchemaError(RuntimeError):
    """The kit's tables in this database disagree with the migrations this code ships."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


@cache
def migrations(dialect: Dialect = "postgresql") -> tuple[Migration, ...]:
    folder = files(__package__) / "migrations"
    if dialect == "sqlite":
        folder = folder / "sqlite"
    found = []
    for item in folder.iterdir():
        match = _FILE.fullmatch(item.name)
        if match:
            found.append(Migration(int(match[1]), match[2], item.read_text("utf-8")))
    return tuple(sorted(found, key=lambda migration: migration.version))


def _pending(applied: list[tuple[Any, ...]], dialect: Dialect) -> list[Migration]:
    known = {migration.version: migration for migration in migrations(dialect)}
    for version, name, checksum in applied:
        migration = known.get(version)
        # A version we do not know is a newer kit's: additive, so older code may still run.
        if migration is not None and migration.checksum != checksum:
            raise SchemaError(
                f"destination kit migration {version}_{name} was changed after it was applied"
            )
    done = {row[0] for row in applied}
    return [migration for migration in migrations(dialect) if migration.version not in done]


def install_sync(conn: psycopg.Connection[Any]) -> list[int]:
    """Create or upgrade the kit's tables; returns the versions applied now (often none)."""
    with conn.transaction():
        conn.execute(sql("install_lock"))
        conn.execute(sql("install_create_migrations_table"))
        applied = conn.execute(sql("install_applied")).fetchall()
        pending = _pending(applied, "postgresql")
        for migration in pending:
            conn.execute(psql.SQL(migration.text))  # our own file, not user input
            conn.execute(sql("install_record"), _record(migration))
    return [migration.version for migration in pending]


async def install(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    """Async ``install_sync``."""
    async with conn.transaction():
        await conn.execute(sql("install_lock"))
        await conn.execute(sql("install_create_migrations_table"))
        applied = await (await conn.execute(sql("install_applied"))).fetchall()
        pending = _pending(applied, "postgresql")
        for migration in pending:
            await conn.execute(psql.SQL(migration.text))  # our own file, not user input
            await conn.execute(sql("install_record"), _record(migration))
    return [migration.version for migration in pending]


def install_sqlite(conn: sqlite3.Connection) -> list[int]:
    """``install_sync`` for SQLite: BEGIN IMMEDIATE holds the database's only write lock, so
    instances starting together install one after the other, the later ones finding nothing
    to do. Inside the caller's open transaction it runs as a savepoint."""
    with atomic(conn, "effectus_install"):
        conn.execute(sqlite_sql("install_create_migrations_table"))
        applied = conn.execute(sqlite_sql("install_applied")).fetchall()
        pending = _pending(applied, "sqlite")
        for migration in pending:
            for statement in sqlite_statements(migration.text):
                conn.execute(statement)  # our own file, not user input
            conn.execute(sqlite_sql("install_record"), _record(migration))
    return [migration.version for migration in pending]


def sqlite_statements(script: str) -> list[str]:
    """The statements of a SQLite script, one by one. Not ``executescript``: it COMMITs any
    open transaction first, which would split the install from its lock and its record."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    leftover = [line for line in pending.splitlines() if line.strip()]
    if any(not line.lstrip().startswith("--") for line in leftover):
        raise SchemaError("a destination kit SQLite migration ends inside a statement")
    return statements


def _record(migration: Migration) -> dict[str, Any]:
    return {"version": migration.version, "name": migration.name, "checksum": migration.checksum}
