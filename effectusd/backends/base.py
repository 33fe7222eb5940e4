"""What every backend does the same way once its dialect's runner and migration runner are
chosen: run a store operation, read, apply and check the store's schema."""

from __future__ import annotations

from functools import partial
from importlib.resources import files
from importlib.resources.abc import Traversable
from types import ModuleType
from typing import Any, TypeVar

from effectusd.backends.errors import schema_checked
from effectusd.backends.migrations import (
    Migration,
    MigrationSet,
    MigrationStatus,
    raise_unless_current,
)
from effectusd.backends.operation import Operation
from effectusd.backends.statements import Statements

T = TypeVar("T")


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


class StoreBackend:
    runner: ModuleType  # run(conn, operation, statements)
    migrator: ModuleType  # status(conn, set, known), migrate(conn, set, known)
    statements: Statements  # the store's named SQL in this dialect
    migrations: MigrationSet  # the store's schema in this dialect

    def run(self, conn: Any, operation: Operation[T]) -> T:
        """Run a store operation in one transaction (a savepoint inside an open one)."""
        with schema_checked():
            result: T = self.runner.run(conn, operation, self.statements)
            return result

    def migration_status(self, conn: Any, known: list[Migration] | None = None) -> MigrationStatus:
        status: MigrationStatus = self.migrator.status(conn, self.migrations, known)
        return status

    def migrate(self, conn: Any, known: list[Migration] | None = None) -> list[Migration]:
        applied: list[Migration] = self.migrator.migrate(conn, self.migrations, known)
        return applied

    def require_current(self, conn: Any) -> None:
        """Refuse to run against a schema older or newer than this code."""
        raise_unless_current(self.migration_status(conn))
