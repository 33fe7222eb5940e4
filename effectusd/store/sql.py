"""The store's SQL in each dialect, which the store hands to the backend: its named statements
(``effectusd/sql/<dialect>/store/NAME.sql``) and its migrations (the repository's top-level
``schema/``, which ``effectusd/schema`` links, so the wheel holds the files and a source tree
reads them in place). A migration set carries its statements: the backend's runner and
notifications run those, its migrator applies the set. ``store_backend(url)`` is the backend of
``url`` serving the store; the backends never name the store's files."""

from __future__ import annotations

from functools import partial
from importlib.resources import files
from importlib.resources.abc import Traversable

from effectusd.backends import Backend, backend_for
from effectusd.backends.migrations import MigrationSet
from effectusd.backends.statements import Statements
from effectusd.core.database_url import Dialect

POSTGRES_STATEMENTS = Statements("effectusd", "sql/postgres/store")
SQLITE_STATEMENTS = Statements("effectusd", "sql/sqlite/store")


def _schema_folder(dialect_folder: str) -> Traversable:
    return files("effectusd") / "schema" / dialect_folder


def _migrations(statements: Statements, dialect_folder: str, **locking: str | None) -> MigrationSet:
    """The store's migration set of one dialect: its files (``schema/<dialect_folder>``) and
    the migrations_* statements of ``statements`` (``locking``: the ``exists`` and ``lock``
    ones, where the dialect has them)."""
    return MigrationSet(
        folder=partial(_schema_folder, dialect_folder),
        statements=statements,
        table="effectus_schema_migrations",
        create="migrations_create_table",
        applied="migrations_applied",
        record="migrations_record",
        **locking,  # type: ignore[arg-type]
    )


POSTGRES_MIGRATIONS = _migrations(
    POSTGRES_STATEMENTS, "migrations", exists="migrations_table_exists", lock="migrations_lock"
)
SQLITE_MIGRATIONS = _migrations(SQLITE_STATEMENTS, "sqlite")
MIGRATIONS: dict[Dialect, MigrationSet] = {
    "postgresql": POSTGRES_MIGRATIONS,
    "sqlite": SQLITE_MIGRATIONS,
}


def store_backend(url: str) -> Backend:
    """The backend of the database ``url`` names, serving the store's schema and statements;
    DatabaseURLError if no backend understands the URL."""
    return backend_for(url, MIGRATIONS)
