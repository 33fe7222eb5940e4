"""Install the kit's tables into the application's database: ordered, checksummed .sql files
under migrations/, applied in one transaction under an advisory lock, so every instance of a
service may call ``install`` at startup and exactly one of them does the work.

``install`` may run inside the caller's own open transaction (it becomes a savepoint), so an
application can create its tables and the kit's atomically.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

import psycopg
from psycopg import sql as psql

from effectusd.destination.queries import sql

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
def migrations() -> tuple[Migration, ...]:
    found = []
    for item in (files(__package__) / "migrations").iterdir():
        match = _FILE.fullmatch(item.name)
        if match:
            found.append(Migration(int(match[1]), match[2], item.read_text("utf-8")))
    return tuple(sorted(found, key=lambda migration: migration.version))


def _pending(applied: list[tuple[Any, ...]]) -> list[Migration]:
    known = {migration.version: migration for migration in migrations()}
    for version, name, checksum in applied:
        migration = known.get(version)
        # A version we do not know is a newer kit's: additive, so older code may still run.
        if migration is not None and migration.checksum != checksum:
            raise SchemaError(
                f"destination kit migration {version}_{name} was changed after it was applied"
            )
    done = {row[0] for row in applied}
    return [migration for migration in migrations() if migration.version not in done]


def install_sync(conn: psycopg.Connection[Any]) -> list[int]:
    """Create or upgrade the kit's tables; returns the versions applied now (often none)."""
    with conn.transaction():
        conn.execute(sql("install_lock"))
        conn.execute(sql("install_create_migrations_table"))
        applied = conn.execute(sql("install_applied")).fetchall()
        pending = _pending(applied)
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
        pending = _pending(applied)
        for migration in pending:
            await conn.execute(psql.SQL(migration.text))  # our own file, not user input
            await conn.execute(sql("install_record"), _record(migration))
    return [migration.version for migration in pending]


def _record(migration: Migration) -> dict[str, Any]:
    return {"version": migration.version, "name": migration.name, "checksum": migration.checksum}
