"""Schema migrations as files, for every store: the ordered, checksummed ``.sql`` files of one
folder, and how they compare with what a database says it applied.

Each store keeps its own folder (``schema/migrations`` for PostgreSQL, ``schema/sqlite`` for
SQLite) and its own way of applying a file; the names, versions and the rules for "pending",
"newer than the code" and "changed after it was applied" are the same everywhere.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from effectusd.core.errors import EffectusError, SchemaNotReady

_FILE = re.compile(r"^(\d+)_([a-z0-9_]+)\.sql$")


class MigrationError(EffectusError, RuntimeError):
    """The database schema and the code disagree in a way migrate must not paper over."""


class SchemaBehind(MigrationError, SchemaNotReady):
    """Migrations are pending (or none was ever applied): `effectusd migrate` fixes it."""


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


def known_migrations(folder: Traversable) -> list[Migration]:
    """The migration files of ``folder`` (``<version>_<name>.sql``), in version order."""
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


def compare(
    known: list[Migration], applied_rows: Iterable[tuple[int, str, str]]
) -> MigrationStatus:
    """What is pending, and what is wrong, given the (version, name, checksum) rows a database
    recorded (in version order)."""
    applied_rows = list(applied_rows)
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


def raise_unless_current(current: MigrationStatus) -> None:
    """Refuse a schema older or newer than this code (``current`` is a store's status)."""
    if current.problems:
        raise MigrationError("; ".join(current.problems))
    if current.pending:
        names = ", ".join(f"{m.version}_{m.name}" for m in current.pending)
        raise SchemaBehind(f"database schema is behind: pending {names}; run `effectusd migrate`")
