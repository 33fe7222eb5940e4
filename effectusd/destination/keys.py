"""An operator's view of one idempotency key in the kit's ledger: show its stored answer, or
forget it so that the next request with the key runs the mutation afresh.

Forgetting is how a saga blocked on a stored permanent failure gets out: the dispatcher's
``effectusd retry`` sends the same key again, and without this the kit would replay the
failure forever. Forgetting a stored *success* lets the retry do the effect a second time, so
it is refused unless forced. Every forget copies the record, the actor and the evidence to
``effectus_dest_key_audit`` (migration 2) in the transaction that deletes it.

Both dialects run the same named statements (effectusd/sql/<dialect>/destination/keys_*.sql).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from effectusd.backends import backend_for
from effectusd.backends.connections import PostgresConnection, SqliteConnection
from effectusd.core.states import OutcomeClass
from effectusd.destination.queries import sql, sqlite_sql
from effectusd.destination.schema import SCHEMAS, install_sqlite, install_sync
from effectusd.destination.sqlite import connect_sqlite, sqlite_path, write_transaction


class KeyRefused(Exception):
    """A key command that did nothing; ``kind`` is not_found, conflict or invalid."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class StoredKey:
    """One ledger row as an operator sees it; times are ISO 8601 in UTC."""

    idempotency_key: str
    argument_hash: str
    state: str
    status_code: int | None
    response_body: str | None  # the stored JSON answer, as text
    outcome: str | None
    fencing_acknowledged: bool
    saga_id: str
    effect_id: str
    direction: str
    verb: str
    request_id: str
    attempt: int
    created_at: str | None
    completed_at: str | None
    expires_at: str | None

    @property
    def answer(self) -> str:
        """success, or the stored outcome class (permanent_failure)."""
        if self.status_code is not None and 200 <= self.status_code < 300:
            return "success"
        return self.outcome or "unclassified"


@dataclass(frozen=True)
class KeyAudit:
    audit_id: int
    action: str
    actor: str
    evidence: str
    forced: bool
    status_code: int
    outcome: str | None
    at: str | None


@dataclass
class KeyReport:
    key: str
    record: StoredKey | None
    audit: list[KeyAudit] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        record = asdict(self.record) if self.record else None
        if record is not None and self.record is not None:
            record["answer"] = self.record.answer
        return {
            "ok": True,
            "key": self.key,
            "record": record,
            "audit": [asdict(a) for a in self.audit],
        }


@dataclass
class ForgetReport:
    key: str
    forgotten: StoredKey
    audit_id: int
    actor: str
    evidence: str
    forced: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "key": self.key,
            "forgotten": {**asdict(self.forgotten), "answer": self.forgotten.answer},
            "audit_id": self.audit_id,
            "actor": self.actor,
            "evidence": self.evidence,
            "forced": self.forced,
        }


class _Ledger(Protocol):
    def rows(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]: ...
    def transaction(self) -> AbstractContextManager[Any]: ...
    def install(self) -> None: ...


class _Postgres:
    def __init__(self, conn: PostgresConnection) -> None:
        self.conn = conn

    @staticmethod
    @contextmanager
    def open(database_url: str) -> Iterator[_Ledger]:
        with backend_for(database_url, SCHEMAS).runner.connect() as conn:  # autocommit
            yield _Postgres(conn)

    def rows(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(sql(name), params)
        return cur.fetchall() if cur.description else []

    def transaction(self) -> AbstractContextManager[Any]:
        return self.conn.transaction()

    def install(self) -> None:
        install_sync(self.conn)


class _Sqlite:
    def __init__(self, conn: SqliteConnection) -> None:
        self.conn = conn

    @staticmethod
    @contextmanager
    def open(database_url: str) -> Iterator[_Ledger]:
        path = sqlite_path(database_url)
        if not path.is_file():
            raise KeyRefused("not_found", "--database-url: no SQLite file at that path")
        conn = connect_sqlite(path)
        try:
            yield _Sqlite(conn)
        finally:
            conn.close()

    def rows(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        return self.conn.execute(sqlite_sql(name), params).fetchall()

    def transaction(self) -> AbstractContextManager[Any]:
        return write_transaction(self.conn)  # BEGIN IMMEDIATE: no request runs meanwhile

    def install(self) -> None:
        install_sqlite(self.conn)


_LEDGERS = {"postgresql": _Postgres.open, "sqlite": _Sqlite.open}


def _ledger(database_url: str) -> AbstractContextManager[_Ledger]:
    return _LEDGERS[backend_for(database_url, SCHEMAS).dialect](database_url)


def _tables(ledger: _Ledger) -> tuple[bool, bool]:
    [(keys, audit)] = ledger.rows("keys_tables", {})
    if not keys:
        raise KeyRefused("not_found", "--database-url: no destination kit tables in that database")
    return bool(keys), bool(audit)


def _time(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return datetime.fromtimestamp(float(value), UTC).isoformat()  # SQLite: REAL Unix seconds


def _stored(row: tuple[Any, ...]) -> StoredKey:
    (key, argument_hash, state, status, body, outcome, acknowledged, *rest) = row
    saga_id, effect_id, direction, verb, request_id, attempt, created, completed, expires = rest
    return StoredKey(
        key,
        argument_hash,
        state,
        status,
        bytes(body).decode("utf-8", "replace") if body is not None else None,
        outcome,
        bool(acknowledged),
        saga_id,
        effect_id,
        direction,
        verb,
        request_id,
        int(attempt),
        _time(created),
        _time(completed),
        _time(expires),
    )


def show_key(database_url: str, key: str) -> KeyReport:
    """The stored answer under ``key`` (None once forgotten or pruned) and its audit trail."""
    with _ledger(database_url) as ledger:
        _, has_audit = _tables(ledger)
        rows = ledger.rows("keys_select", {"key": key})
        audit = ledger.rows("keys_audit", {"key": key}) if has_audit else []
    if not rows and not audit:
        raise KeyRefused("not_found", "no stored answer and no audit under that key")
    return KeyReport(
        key,
        _stored(rows[0]) if rows else None,
        [
            KeyAudit(audit_id, action, actor, evidence, bool(forced), status, outcome, _time(at))
            for audit_id, action, actor, evidence, forced, status, outcome, at in audit
        ],
    )


def forget_key(
    database_url: str, key: str, *, evidence: str, actor: str, force: bool = False
) -> ForgetReport:
    """Delete the stored answer under ``key`` and audit it, in one transaction. A stored
    permanent failure only, unless ``force``: forgetting a success invites a double effect.
    Installs the kit's pending migrations first (the audit table), as a service's startup does.
    """
    evidence = evidence.strip()
    if not evidence:
        raise KeyRefused("invalid", "--evidence must say why the answer may be forgotten")
    with _ledger(database_url) as ledger:
        _tables(ledger)
        ledger.install()
        with ledger.transaction():
            [(acquired,)] = ledger.rows("try_lock_key", {"key": key})
            if not acquired:
                raise KeyRefused(
                    "conflict", "a request with that key is in progress now; nothing was forgotten"
                )
            rows = ledger.rows("keys_select", {"key": key})
            if not rows:
                raise KeyRefused("not_found", "no stored answer under that key")
            record = _stored(rows[0])
            forced = record.answer != OutcomeClass.PERMANENT.value
            if forced and not force:
                raise KeyRefused(
                    "conflict",
                    f"the stored answer is {record.answer} ({record.status_code}), not a "
                    "permanent failure: forgetting it lets the next request run the mutation "
                    "again, a double effect; give --force only if that is what you want",
                )
            params = {"key": key, "actor": actor, "evidence": evidence, "forced": forced}
            [(audit_id,)] = ledger.rows("keys_forget_record", params)
            ledger.rows("keys_forget_delete", {"key": key})
    return ForgetReport(key, record, int(audit_id), actor, evidence, forced)
