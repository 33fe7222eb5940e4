"""Opening a SQLite database the way every effectusd process must: WAL, a busy timeout,
foreign keys on, and converters that give back the Python types psycopg gives."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

BUSY_TIMEOUT_MS = 10_000  # writers queue on the file lock; a daemon batch holds it briefly
# RETURNING, UPDATE ... FROM and the ->> operator (lock_sagas.sql) need 3.38.
MINIMUM_SQLITE = (3, 38, 0)


def _timestamp(raw: bytes) -> datetime:
    return datetime.fromtimestamp(float(raw), UTC)


def _boolean(raw: bytes) -> bool:
    return raw not in (b"0", b"")


def _json(raw: bytes) -> object:
    return json.loads(raw)


def _adapt_datetime(value: datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # naive times are UTC, as everywhere in effectusd
    return value.timestamp()


sqlite3.register_converter("timestamp_real", _timestamp)
sqlite3.register_converter("boolean", _boolean)
sqlite3.register_converter("json_text", _json)
sqlite3.register_adapter(datetime, _adapt_datetime)


def connect(path: str | Path, *, create: bool = False) -> sqlite3.Connection:
    """The store's connection, in autocommit mode: the runner opens ``BEGIN IMMEDIATE``
    itself, so two writers queue on the lock instead of failing when a read transaction tries
    to write. Columns come back as the Python types psycopg gives (the converters above).

    Only ``create=True`` (migrate) may create the file: anything else pointed at a missing
    file is a typo or a wrong working directory, and an empty new file would hide that."""
    if sqlite3.sqlite_version_info < MINIMUM_SQLITE:
        raise sqlite3.NotSupportedError(
            f"SQLite {sqlite3.sqlite_version} is too old: effectusd needs "
            f"{'.'.join(map(str, MINIMUM_SQLITE))} or newer (or use PostgreSQL)"
        )
    if not create and str(path) != ":memory:" and not Path(path).exists():
        raise sqlite3.OperationalError(
            f"SQLite database {path} does not exist (create it with `effectusd migrate`)"
        )
    return open_connection(path, BUSY_TIMEOUT_MS / 1000, typed=True)


def open_connection(
    path: str | Path, busy_timeout_s: float, *, typed: bool, require_wal: bool = False
) -> sqlite3.Connection:
    """WAL (readers never block the writer), a busy timeout, commits that survive power loss,
    foreign keys on; ``isolation_level=None``, so whoever uses it begins its own transactions.
    ``typed``: columns declared TIMESTAMP_REAL, BOOLEAN or JSON_TEXT read back converted."""
    conn = sqlite3.connect(
        str(path),
        isolation_level=None,
        detect_types=sqlite3.PARSE_DECLTYPES | sqlite3.PARSE_COLNAMES if typed else 0,
        timeout=busy_timeout_s,
        check_same_thread=False,  # each connection is still used by one thread at a time
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {round(busy_timeout_s * 1000)}")
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if require_wal and mode != "wal":
            raise sqlite3.NotSupportedError(f"{path}: journal mode stayed {mode!r}, not WAL")
        conn.execute("PRAGMA synchronous = FULL")  # a commit survives power loss, as in PostgreSQL
        conn.execute("PRAGMA foreign_keys = ON")
    except BaseException:
        conn.close()
        raise
    return conn
