"""Schema migrations as files, for every database and every schema: the ordered, checksummed
``.sql`` files of one folder, how they compare with what a database says it applied, and the
policy of a migration set.

Two sets exist today, each in both dialects: the store's (``schema/migrations`` and
``schema/sqlite``; strict: a database newer than the code is refused, and each file applies in
its own transaction) and the destination kit's (tolerant: a newer kit's additive tables are
left alone, and the whole install is one transaction, or a savepoint of the caller's). The
names, versions and the rules for "pending" and "changed after it was applied" are the same
everywhere; each dialect's ``migrations`` module applies a set.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from effectusd.backends.statements import Statements
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

    def record(self) -> dict[str, object]:
        """The parameters of a set's ``record`` statement."""
        return {"version": self.version, "name": self.name, "checksum": self.checksum}


@dataclass(frozen=True)
class MigrationStatus:
    applied: list[int]
    pending: list[Migration]
    problems: list[str]

    @property
    def current(self) -> bool:
        return not self.pending and not self.problems


@dataclass(frozen=True)
class MigrationSet:
    """One schema's migrations in one dialect: where its files are, the statements that lock,
    create, read and record its table, and its policy."""

    folder: Callable[[], Traversable]
    statements: Statements
    table: str
    create: str
    applied: str
    record: str
    exists: str | None = None  # reads whether the table exists (status without creating it)
    lock: str | None = None  # PostgreSQL's advisory lock; SQLite's write lock needs none
    # The kit: a version this code does not know is a newer kit's, additive, so it may run.
    tolerate_newer: bool = False
    label: str = "migration"  # how errors name a file of the set
    error: type[Exception] = MigrationError

    def known(self) -> list[Migration]:
        return known_migrations(self.folder())

    def compare(
        self, known: list[Migration], applied_rows: Iterable[tuple[int, str, str]]
    ) -> MigrationStatus:
        current = compare(known, applied_rows, self.label)
        if not self.tolerate_newer:
            return current
        changed = [problem for problem in current.problems if _CHANGED in problem]
        return MigrationStatus(current.applied, current.pending, changed)

    def pending(
        self, known: list[Migration], applied_rows: Iterable[tuple[int, str, str]]
    ) -> list[Migration]:
        """What to apply now; the set's error if the database disagrees with the code."""
        current = self.compare(known, applied_rows)
        if current.problems:
            raise self.error("; ".join(current.problems))
        return current.pending


_CHANGED = "was changed after it was applied"


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
    known: list[Migration],
    applied_rows: Iterable[tuple[int, str, str]],
    label: str = "migration",
) -> MigrationStatus:
    """What is pending, and what is wrong, given the (version, name, checksum) rows a database
    recorded (in version order)."""
    applied_rows = [(row[0], row[1], row[2]) for row in applied_rows]
    by_version = {migration.version: migration for migration in known}
    problems = []
    for version, name, checksum in applied_rows:
        migration = by_version.get(version)
        if migration is None:
            problems.append(
                f"database has {label} {version}_{name}, which this effectusd does not know "
                "(the database is newer than the code)"
            )
        elif migration.checksum != checksum:
            problems.append(
                f"{label} {version}_{name} {_CHANGED} "
                f"(checksum {checksum[:12]}… in the database, {migration.checksum[:12]}… on disk)"
            )
    applied = [row[0] for row in applied_rows]
    pending = [migration for migration in known if migration.version not in set(applied)]
    if applied and pending and pending[0].version < max(applied):
        problems.append(
            f"{label} {pending[0].version}_{pending[0].name} is older than applied "
            f"{label} {max(applied)} and was never applied"
        )
    return MigrationStatus(applied, pending, problems)


def raise_unless_current(current: MigrationStatus) -> None:
    """Refuse a schema older or newer than this code (``current`` is a store's status)."""
    if current.problems:
        raise MigrationError("; ".join(current.problems))
    if current.pending:
        names = ", ".join(f"{m.version}_{m.name}" for m in current.pending)
        raise SchemaBehind(f"database schema is behind: pending {names}; run `effectusd migrate`")
