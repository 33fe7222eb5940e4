"""Which database a URL names: one parser for the dispatcher's store and the kit's ledger.

The convention is the project's: ``sqlite:///relative/path.db`` (three slashes, then a path
relative to the working directory) and ``sqlite:////absolute/path.db`` (four slashes) name a
SQLite file; ``postgresql://...`` or ``postgres://...`` name a PostgreSQL database. A libpq
keyword/value string (``host=... dbname=...``, what ``psycopg.conninfo.make_conninfo``
returns) is PostgreSQL too, because scripts already hand such strings around.

Pure (no connection is opened here), so it lives in core, where the kit can use it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from effectusd.core.conninfo import ConninfoError, conninfo_params
from effectusd.core.errors import EffectusError

Dialect = Literal["postgresql", "sqlite"]

SQLITE_PREFIX = "sqlite:///"
POSTGRES_SCHEMES = ("postgresql", "postgres")
EXPECTED = "expected sqlite:///relative/path.db, sqlite:////absolute/path.db or postgresql://..."


class DatabaseURLError(EffectusError, ValueError):
    """A database URL no store can use. The message never repeats the URL itself, because a
    PostgreSQL URL may carry a password."""


@dataclass(frozen=True, slots=True)
class SqliteDatabase:
    path: Path  # a relative path stays relative: it is opened from the working directory

    dialect: ClassVar[Dialect] = "sqlite"


@dataclass(frozen=True, slots=True)
class PostgresDatabase:
    # Neither is in the repr: both may hold a password.
    conninfo: str = field(repr=False)  # as given
    # What it sets, parsed once (effectusd/core/conninfo.py): the backend builds its
    # connection string from these, never from ``conninfo`` again.
    params: dict[str, str] = field(default_factory=dict, repr=False, hash=False, compare=False)

    dialect: ClassVar[Dialect] = "postgresql"


Database = SqliteDatabase | PostgresDatabase


def parse_database_url(url: str) -> Database:
    """The database ``url`` names, or DatabaseURLError saying what is wrong with it."""
    if not url.strip():
        raise DatabaseURLError(f"database URL: empty; {EXPECTED}")
    scheme, separator, _ = url.partition(":")
    if scheme.lower() == "sqlite":
        return SqliteDatabase(_sqlite_path(url))
    if separator and scheme.lower() in POSTGRES_SCHEMES and url[len(scheme) :].startswith("://"):
        return _postgres(url)
    if "://" not in url and "=" in url:
        return _postgres(url)  # libpq keyword/value form
    named = f"scheme {scheme!r}" if separator and scheme.isalnum() else "no known scheme"
    raise DatabaseURLError(f"database URL: {named}; {EXPECTED}")


def _postgres(url: str) -> PostgresDatabase:
    try:
        return PostgresDatabase(url, conninfo_params(url))
    except ConninfoError as exc:  # its text is fixed: it quotes nothing of the URL
        raise DatabaseURLError(f"PostgreSQL database URL: {exc}") from None


def _sqlite_path(url: str) -> Path:
    if not url.lower().startswith(SQLITE_PREFIX):
        # sqlite://name.db would put the file name where a URL's host goes: refuse, don't guess.
        raise DatabaseURLError(f"SQLite database URL: needs three slashes; {EXPECTED}")
    path = url[len(SQLITE_PREFIX) :]
    if not path or path == "/":
        raise DatabaseURLError(f"SQLite database URL: no file path; {EXPECTED}")
    if "?" in path or "#" in path:
        # Options in a query string would be silently ignored by sqlite3.connect on a path.
        raise DatabaseURLError("SQLite database URL: query strings and fragments are not supported")
    if path == ":memory:":
        # Every connection would get its own empty database: nothing could be shared.
        raise DatabaseURLError(
            "SQLite database URL: an in-memory database is private to one connection"
        )
    return Path(path)
