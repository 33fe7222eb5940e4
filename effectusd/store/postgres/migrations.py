"""Schema migrations: ordered .sql files, applied under an advisory lock, checksummed.

The files live in ``schema/migrations`` in the source tree and ship inside the wheel as
``effectusd/_migrations``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import psycopg

from effectusd.store.postgres.queries import sql

_FILE = re.compile(r"^(\d+)_([a-z0-9_]+)\.sql$")


class MigrationError(RuntimeError):
    """The database schema and the code disagree in a way migrate must not paper over."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class MigrationStatus:
    applied: list[int]
    pending: list[Migration]
    problems: list[str]

    @property
    def current(self) -> bool:
        return not self.pending and not self.problems


def _migrations_folder() -> Traversable:
    shipped = files("effectusd") / "_migrations"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[3] / "schema" / "migrations"


def known_migrations(folder: Traversable | None = None) -> list[Migration]:
    folder = folder or _migrations_folder()
    found = []
    for item in folder.iterdir():
        match = _FILE.match(item.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), item.read_text("utf-8")))
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migration files share a version: {versions}")
    return found


def status(conn: psycopg.Connection, known: list[Migration] | None = None) -> MigrationStatus:
    known = known if known is not None else known_migrations()
    present = conn.execute(sql("migrations_table_exists")).fetchone()
    applied_rows = (
        conn.execute(sql("migrations_applied")).fetchall() if present and present[0] else []
    )
    by_version = {migration.version: migration for migration in known}
    problems = []
    for version, name, checksum in applied_rows:
        migration = by_version.get(version)
        if migration is None:
            problems.append(
                f"database has migration {version}_{name}, which this effectusd does not know "
                "(the database is newer than the code)"
            )
        elif migration.checksum != checksum:
            problems.append(
                f"migration {version}_{name} was changed after it was applied "
                f"(checksum {checksum[:12]}… in the database, {migration.checksum[:12]}… on disk)"
            )
    applied = [row[0] for row in applied_rows]
    pending = [migration for migration in known if migration.version not in set(applied)]
    if applied and pending and pending[0].version < max(applied):
        problems.append(
            f"migration {pending[0].version}_{pending[0].name} is older than applied "
            f"migration {max(applied)} and was never applied"
        )
    return MigrationStatus(applied, pending, problems)


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
    current = status(conn)
    if current.problems:
        raise MigrationError("; ".join(current.problems))
    if current.pending:
        names = ", ".join(f"{m.version}_{m.name}" for m in current.pending)
        raise MigrationError(f"database schema is behind: pending {names}; run `effectusd migrate`")
