"""What the drivers raise, classified once for everything above the backends: which errors
mean "the database is unreachable or refused" (retried, never a crash), which say nothing
about the work itself, which mean "the schema is missing", and how to name any of them in
evidence without quoting a row's values."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pg_errors

from effectusd.core.errors import SchemaNotReady

# What a store raises when the database is unreachable or refuses: retried, never a crash.
DATABASE_ERRORS: tuple[type[BaseException], ...] = (psycopg.Error, sqlite3.Error, OSError)
# Failures that say nothing about the work itself (connection lost, server shutting down,
# deadlock or serialization failure, disk full, lock timeout): the same write is retried.
# Anything else a write raises is taken as deterministic, a property of the rows it writes.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    sqlite3.OperationalError,
    OSError,
    TimeoutError,
)
# What "cannot reach / open the database" looks like, for the CLI's exit code 1.
UNAVAILABLE: tuple[type[BaseException], ...] = (psycopg.OperationalError, sqlite3.OperationalError)
# A write refused by a server that takes none (a standby, default_transaction_read_only on):
# its transaction rolled back, nothing of it was written.
READ_ONLY: tuple[type[BaseException], ...] = (pg_errors.ReadOnlySqlTransaction,)
# Anything psycopg raises (the kit's key commands report them and exit 1).
POSTGRES_ERRORS: tuple[type[BaseException], ...] = (psycopg.Error,)
# Errors of a connection that failed (PostgreSQL): before BEGIN, nothing can have committed.
CONNECTION_FAILED: tuple[type[BaseException], ...] = (psycopg.OperationalError,)
# A LISTEN connection lost after it worked.
LISTEN_LOST: tuple[type[BaseException], ...] = (psycopg.Error, OSError)
# Both end the transaction before anything of it committed, so retrying is safe.
CONFLICTS: tuple[type[BaseException], ...] = (
    pg_errors.SerializationFailure,
    pg_errors.DeadlockDetected,
)
MIGRATE = "run `effectusd migrate`"


def failure_name(error: BaseException) -> str:
    """What kind of failure ``error`` is, fit for evidence and logs: its class, and the
    SQLSTATE, SQLite error name and constraint when the driver reports them. Never its
    message: database messages quote the values of the row they refused."""
    parts = [type(error).__name__]
    for attribute in ("sqlstate", "sqlite_errorname"):
        code = getattr(error, attribute, None)
        if code:
            parts.append(str(code))
    constraint = getattr(getattr(error, "diag", None), "constraint_name", None)
    if constraint:
        parts.append(f"constraint {constraint}")
    return " ".join(parts)


def unavailable_text(error: BaseException) -> str:
    """What the command line and the log may say of a database that could not be reached or
    used: for PostgreSQL, ``failure_name`` only (its class and SQLSTATE), because the driver's
    message may quote the server's host, the user or part of the connection string; SQLite's
    message names a file at most, and says what to do about it."""
    if isinstance(error, sqlite3.Error):
        return str(error).strip()
    return failure_name(error)


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLITE_BUSY: the lock was not had in time, the statement did nothing."""
    code = getattr(exc, "sqlite_errorcode", None)
    # Extended codes (SQLITE_BUSY_SNAPSHOT, …) keep the primary code in the low byte.
    return (
        isinstance(exc, sqlite3.OperationalError)
        and code is not None
        and (code & 0xFF == sqlite3.SQLITE_BUSY)
    )


_SQLITE_MISSING = ("no such table", "no such column")


def schema_missing(exc: BaseException) -> SchemaNotReady | None:
    """The SchemaNotReady a store error means, if it is a table or column the migrations
    create (a later migration not applied yet)."""
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedColumn):
        detail = exc.diag.message_primary or "a table or column is missing"
    elif isinstance(exc, sqlite3.OperationalError) and (
        str(exc).startswith(_SQLITE_MISSING) or " has no column named " in str(exc)
    ):
        detail = str(exc)
    else:
        return None
    return SchemaNotReady(
        f"the database has no effectusd schema or an older one ({detail}): {MIGRATE}"
    )


@contextmanager
def schema_checked() -> Iterator[None]:
    """Turn "no such table" (or column) into SchemaNotReady, which tells the reader to
    migrate."""
    try:
        yield
    except (pg_errors.UndefinedTable, pg_errors.UndefinedColumn, sqlite3.OperationalError) as exc:
        missing = schema_missing(exc)
        if missing is None:
            raise
        raise missing from exc


def conflict(exc: BaseException) -> bool:
    """A transaction that ended before anything of it committed, so retrying is safe:
    PostgreSQL's serialization failure or deadlock, SQLite's lock not had in time."""
    return isinstance(exc, CONFLICTS) or is_busy(exc)
