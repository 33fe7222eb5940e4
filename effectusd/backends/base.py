"""What every backend does the same way whatever its dialect: where the store's migrations
are, and the policy of its migrator (``Migrator``, effectusd.backends)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import partial
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from effectusd.backends.migrations import (
    Migration,
    MigrationSet,
    MigrationStatus,
    raise_unless_current,
)
from effectusd.backends.statements import Statements


def _schema_folder(dialect_folder: str) -> Traversable:
    """The package's ``schema/<dialect_folder>``: ``effectusd/schema`` links the repository's
    top-level ``schema/``, so the wheel holds the files and a source tree reads them in place."""
    return files("effectusd") / "schema" / dialect_folder


def store_migrations(
    statements: Statements, dialect_folder: str, **locking: str | None
) -> MigrationSet:
    """The store's migration set of one dialect: its files (``schema/<dialect_folder>``), and
    the migrations_* statements of its ``statements`` (``locking``: the ``exists`` and ``lock``
    ones, where it has them)."""
    return MigrationSet(
        folder=partial(_schema_folder, dialect_folder),
        statements=statements,
        table="effectus_schema_migrations",
        create="migrations_create_table",
        applied="migrations_applied",
        record="migrations_record",
        **locking,  # type: ignore[arg-type]
    )


class StoreMigrator(ABC):
    """Reads, applies and checks the store's schema in one dialect (``Migrator``): the
    dialect's migrations module applies ``migrations``."""

    def __init__(self, migrations: MigrationSet) -> None:
        self.migrations = migrations

    @abstractmethod
    def status(self, conn: Any, known: list[Migration] | None = None) -> MigrationStatus:
        """What is applied, what is pending, what is wrong (``known``: the set's files)."""

    @abstractmethod
    def migrate(self, conn: Any, known: list[Migration] | None = None) -> list[Migration]:
        """Apply every pending migration; the ones applied now."""

    def require_current(self, conn: Any) -> None:
        """Refuse to run against a schema older or newer than this code."""
        raise_unless_current(self.status(conn))
