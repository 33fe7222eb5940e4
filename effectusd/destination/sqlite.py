"""The destination kit on SQLite: the same decisions as on PostgreSQL (exchange.py), run over
a ``sqlite3`` connection in the SQLite dialect (sql/sqlite/*.sql).

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
import sqlite3
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from effectusd.core.database_url import PostgresDatabase, parse_database_url
from effectusd.destination.exchange import (
    DEFAULT_RETENTION,
    MUTATE,
    Abandon,
    Exchange,
    Query,
    Refused,
    Step,
)
from effectusd.destination.protocol import EffectusRequest
from effectusd.destination.queries import sqlite_sql
from effectusd.destination.replies import PermanentFailure, Reply, RetryableFailure

SqliteMutation = Callable[[sqlite3.Connection, EffectusRequest], Any]
DEFAULT_BUSY_TIMEOUT = 5.0  # seconds a writer waits for the lock before answering 503
MINIMUM_SQLITE = (3, 37, 0)  # STRICT tables (3.37) and RETURNING (3.35)
_SAVEPOINT = "effectus_mutation"


def connect_sqlite(
    database: str | os.PathLike[str], *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
) -> sqlite3.Connection:
    """Open a SQLite database the way the kit needs it: ``database`` is a ``sqlite:///`` URL
    (a ``str``) or a file path (a ``Path``)."""
    path = sqlite_path(database)
    if sqlite3.sqlite_version_info < MINIMUM_SQLITE:
        wanted = ".".join(map(str, MINIMUM_SQLITE))
        raise RuntimeError(
            f"the destination kit needs SQLite {wanted} or newer; "
            f"this Python's sqlite3 links {sqlite3.sqlite_version}"
        )
    if busy_timeout < 0:
        raise ValueError("busy_timeout: a number of seconds, not negative")
    try:
        conn = sqlite3.connect(
            path,
            timeout=busy_timeout,
            # The kit issues BEGIN IMMEDIATE itself; sqlite3's implicit BEGIN would be deferred.
            isolation_level=None,
            # SqlitePool hands a connection to one worker thread at a time, not always the same.
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise sqlite3.OperationalError(f"cannot open SQLite database {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {round(busy_timeout * 1000)}")
        # WAL: readers never block the writer, and a commit does not wait for readers.
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode != "wal":
            raise sqlite3.NotSupportedError(f"{path}: journal mode stayed {mode!r}, not WAL")
        conn.execute("PRAGMA synchronous = FULL")  # a reply says committed: survive power loss
        conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def sqlite_path(database: str | os.PathLike[str]) -> Path:
    """The file a ``sqlite:///`` URL (a ``str``) or a path (a ``PathLike``) names."""
    if not isinstance(database, str):
        return Path(database)
    parsed = parse_database_url(database)
    if isinstance(parsed, PostgresDatabase):
        raise ValueError("connect_sqlite: got a PostgreSQL URL; expected sqlite:///path.db")
    return parsed.path


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLITE_BUSY: the lock was not had in time, the statement did nothing."""
    code = getattr(exc, "sqlite_errorcode", None)
    # Extended codes (SQLITE_BUSY_SNAPSHOT, …) keep the primary code in the low byte.
    return (
        isinstance(exc, sqlite3.OperationalError)
        and code is not None
        and (code & 0xFF == sqlite3.SQLITE_BUSY)
    )


def _require_own_transaction(conn: sqlite3.Connection, who: str) -> None:
    if conn.isolation_level is not None:
        raise ValueError(
            f"{who}: open the connection with isolation_level=None (connect_sqlite does); "
            "the kit begins its own transactions"
        )
    if conn.in_transaction:
        # The reply promises "committed"; only a transaction we begin and end can keep that.
        raise ValueError(f"{who} owns the transaction: pass a connection outside one")


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; ROLLBACK if the block raises or COMMIT fails."""
    _require_own_transaction(conn, "write_transaction")
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        # A COMMIT refused with SQLITE_BUSY leaves the transaction open; end it, undone.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextmanager
def atomic(conn: sqlite3.Connection, name: str = "effectus_atomic") -> Iterator[None]:
    """A savepoint inside the caller's open transaction, else a ``write_transaction``."""
    if not conn.in_transaction:
        with write_transaction(conn):
            yield
        return
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


def handle_sqlite(
    conn: sqlite3.Connection,
    request: EffectusRequest,
    mutation: SqliteMutation,
    *,
    retention: timedelta = DEFAULT_RETENTION,
) -> Reply:
    """Answer ``request``, running ``mutation(conn, request)`` at most once per key.

    The mutation writes through ``conn`` only (its writes commit with the ledger row), must not
    end the transaction, and returns a JSON value, the 200 body; or raises PermanentFailure /
    RetryableFailure. Any other exception rolls back and propagates.
    """
    _require_own_transaction(conn, "handle_sqlite")
    exchange = Exchange(request, retention)
    steps = exchange.steps()
    try:
        with write_transaction(conn):
            reply = _drive(conn, steps, request, mutation)
        return reply  # committed
    except (Abandon, RetryableFailure) as exc:
        return exchange.rolled_back(exc)
    except sqlite3.OperationalError as exc:
        if is_busy(exc):  # from BEGIN IMMEDIATE or a refused COMMIT: nothing committed
            return exchange.rolled_back(exc)
        raise
    finally:
        steps.close()


def _drive(
    conn: sqlite3.Connection,
    steps: Generator[Step, Any, Reply],
    request: EffectusRequest,
    mutation: SqliteMutation,
) -> Reply:
    answer: Any = None
    while True:
        try:
            step = steps.send(answer)
        except StopIteration as done:
            reply: Reply = done.value
            return reply
        if isinstance(step, Query):
            params = {name: _sqlite_value(value) for name, value in step.params.items()}
            # fetchall, not fetchone: a RETURNING statement is finished only once read to the end.
            rows = conn.execute(sqlite_sql(step.name), params).fetchall()
            answer = rows[0] if rows else None
        else:
            assert step is MUTATE
            answer = _mutate(conn, request, mutation)


def _mutate(conn: sqlite3.Connection, request: EffectusRequest, mutation: SqliteMutation) -> Any:
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


def _require_still_open(conn: sqlite3.Connection) -> None:
    if not conn.in_transaction:
        # What it wrote and the in_progress ledger row are committed now; the row keeps
        # answering 409 unknown_outcome, which is the truth: the answer was never stored.
        raise RuntimeError(
            "the mutation ended the kit's transaction (COMMIT or ROLLBACK on its connection)"
        )


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()  # times are REAL Unix seconds in the SQLite schema
    return value


def prune_ledger_sqlite(
    conn: sqlite3.Connection, *, before: datetime | None = None, batch: int = 1000
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
