"""The destination kit on SQLite: the same decisions as on PostgreSQL (exchange.py), run over
a ``sqlite3`` connection in the SQLite dialect (effectusd/sql/sqlite/destination/*.sql).

    conn = connect_sqlite("sqlite:///shop.db")   # WAL, busy timeout, foreign keys
    install_sqlite(conn)                          # once, at startup: the kit's tables
    reply = handle_sqlite(conn, request, charge)  # charge(conn, request) is a plain function

SQLite has one writer at a time. Every exchange runs in ``BEGIN IMMEDIATE`` … ``COMMIT``: the
write lock is taken before the ledger is read, so a second request for the same key waits for
the first to finish (up to the busy timeout) and then replays its answer; when the wait runs
out it answers 503 retryable_failure_known_not_committed, nothing having begun. A deferred
transaction would instead read, then fail at its first write with no waiting at all.

Every call here blocks; from async code run it in a thread (``SqlitePool`` does).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from effectusd.backends import sqlite as backend
from effectusd.backends.connections import SqliteConnection
from effectusd.backends.errors import is_busy
from effectusd.backends.operation import drive
from effectusd.backends.sqlite.connection import open_connection
from effectusd.backends.sqlite.runner import adapted
from effectusd.core.database_url import PostgresDatabase, parse_database_url
from effectusd.destination.exchange import (
    DEFAULT_CLOCK_SKEW,
    DEFAULT_RETENTION,
    MUTATE,
    Clock,
    Exchange,
    Query,
    Refused,
    Step,
    wall_clock,
)
from effectusd.destination.probe import probe_steps
from effectusd.destination.protocol import EffectusRequest
from effectusd.destination.queries import sqlite_sql
from effectusd.destination.replies import PermanentFailure, Reply
from effectusd.destination.schema import require_own_transaction

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "SqliteMutation",
    "atomic",
    "connect_sqlite",
    "handle_sqlite",
    "is_busy",
    "probe_sqlite",
    "prune_ledger_sqlite",
    "sqlite_path",
    "write_transaction",
]

SqliteMutation = Callable[[SqliteConnection, EffectusRequest], Any]
DEFAULT_BUSY_TIMEOUT = 5.0  # seconds a writer waits for the lock before answering 503
MINIMUM_SQLITE = (3, 37, 0)  # STRICT tables (3.37) and RETURNING (3.35)
_SAVEPOINT = "effectus_mutation"


def connect_sqlite(
    database: str | os.PathLike[str], *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
) -> SqliteConnection:
    """Open a SQLite database the way the kit needs it: ``database`` is a ``sqlite:///`` URL
    (a ``str``) or a file path (a ``Path``)."""
    path = sqlite_path(database)
    if backend.version_info() < MINIMUM_SQLITE:
        wanted = ".".join(map(str, MINIMUM_SQLITE))
        raise RuntimeError(
            f"the destination kit needs SQLite {wanted} or newer; "
            f"this Python's sqlite3 links {backend.version()}"
        )
    if busy_timeout < 0:
        raise ValueError("busy_timeout: a number of seconds, not negative")
    try:
        return open_connection(path, busy_timeout, typed=False, require_wal=True)
    except backend.OperationalError as exc:
        raise backend.OperationalError(f"cannot open SQLite database {path}: {exc}") from exc


def sqlite_path(database: str | os.PathLike[str]) -> Path:
    """The file a ``sqlite:///`` URL (a ``str``) or a path (a ``PathLike``) names."""
    if not isinstance(database, str):
        return Path(database)
    parsed = parse_database_url(database)
    if isinstance(parsed, PostgresDatabase):
        raise ValueError("connect_sqlite: got a PostgreSQL URL; expected sqlite:///path.db")
    return parsed.path


@contextmanager
def write_transaction(conn: SqliteConnection) -> Iterator[SqliteConnection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; ROLLBACK if the block raises or COMMIT fails."""
    require_own_transaction(conn, "write_transaction")
    with backend.write_transaction(conn):
        yield conn


@contextmanager
def atomic(conn: SqliteConnection, name: str = "effectus_atomic") -> Iterator[None]:
    """A savepoint inside the caller's open transaction, else a ``write_transaction``."""
    if not conn.in_transaction:
        require_own_transaction(conn, "write_transaction")
    with backend.atomic(conn, name):
        yield


def handle_sqlite(
    conn: SqliteConnection,
    request: EffectusRequest,
    mutation: SqliteMutation,
    *,
    retention: timedelta = DEFAULT_RETENTION,
    clock_skew: timedelta = DEFAULT_CLOCK_SKEW,
    clock: Clock = wall_clock,
) -> Reply:
    """Answer ``request``, running ``mutation(conn, request)`` at most once per key.

    The mutation writes through ``conn`` only (its writes commit with the ledger row), must not
    end the transaction, and returns a JSON value, the 200 body; or raises PermanentFailure /
    RetryableFailure. Any other exception rolls back and propagates. ``retention``,
    ``clock_skew`` and ``clock``: as for ``handle``.
    """
    require_own_transaction(conn, "handle_sqlite")
    exchange = Exchange(request, retention, clock_skew, clock)

    def perform(conn: SqliteConnection, step: Step) -> Any:
        if isinstance(step, Query):
            # fetchall, not fetchone: a RETURNING statement is finished only once read to the end.
            rows = conn.execute(sqlite_sql(step.name), adapted(step.params)).fetchall()
            return rows[0] if rows else None
        assert step is MUTATE
        return _mutate(conn, request, mutation)

    # BEGIN IMMEDIATE, or a COMMIT refused, that stayed busy: settled, nothing committed
    return exchange.carry_out_blocking(backend.write_transaction(conn), perform)


def _mutate(conn: SqliteConnection, request: EffectusRequest, mutation: SqliteMutation) -> Any:
    conn.execute(f"SAVEPOINT {_SAVEPOINT}")  # a refusal keeps none of the mutation's writes
    try:
        result = mutation(conn, request)
    except PermanentFailure as failure:
        _require_still_open(conn)
        conn.execute(f"ROLLBACK TO {_SAVEPOINT}")
        conn.execute(f"RELEASE {_SAVEPOINT}")
        return Refused(failure)
    _require_still_open(conn)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # never awaited: say so here, not in a "never awaited" warning
        raise TypeError(
            "the mutation returned an awaitable; on SQLite a mutation is a plain function "
            "(conn: sqlite3.Connection, request) run in a worker thread"
        )
    conn.execute(f"RELEASE {_SAVEPOINT}")
    return result


def _require_still_open(conn: SqliteConnection) -> None:
    if not conn.in_transaction:
        # What it wrote and the in_progress ledger row are committed now; the row keeps
        # answering 409 unknown_outcome, which is the truth: the answer was never stored.
        raise RuntimeError(
            "the mutation ended the kit's transaction (COMMIT or ROLLBACK on its connection)"
        )


def probe_sqlite(conn: SqliteConnection, key: str) -> Reply:
    """What the ledger knows of ``key`` (probe.py), read under the write lock: it waits for an
    open request's transaction to end (up to the busy timeout; then the busy error propagates)."""
    require_own_transaction(conn, "probe_sqlite")
    steps = probe_steps(key)

    def perform(step: Query) -> Any:
        rows = conn.execute(sqlite_sql(step.name), adapted(step.params)).fetchall()
        return rows[0] if rows else None

    try:
        with backend.write_transaction(conn):
            return drive(steps, perform)
    finally:
        steps.close()


def prune_ledger_sqlite(
    conn: SqliteConnection, *, before: datetime | None = None, batch: int = 1000
) -> int:
    """Delete ledger rows that expired by ``before`` (default: now); returns how many.

    Run it from a scheduler. Pruning a key while its dispatch may still be retried would let
    the retry run the mutation again: keep ``retention`` above every caller's retry budget.
    """
    if before is not None and before.tzinfo is None:
        raise ValueError("before: needs a timezone-aware datetime")
    if batch < 1:
        raise ValueError("batch: must be at least 1")
    params = {"before": before.timestamp() if before is not None else None, "batch": batch}
    pruned = 0
    while True:
        with write_transaction(conn):
            deleted = conn.execute(sqlite_sql("prune_keys"), params).rowcount
        pruned += deleted
        if deleted < batch:
            return pruned
