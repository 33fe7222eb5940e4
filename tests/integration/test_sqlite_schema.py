"""The SQLite schema and its named statements, against real SQLite files (issue #7).

Covers: migrate (idempotent, transactional, same versions as PostgreSQL), status and
require_current, that every statement in effectusd/sql/sqlite/store prepares against the
migrated schema, representative CHECKs, fencing tokens (never lowered, handed out once, live
leases respected, durable across reopening the file), the append-only timeline that leaves only
with its saga, the claim statements (partial index, guards, converted types) and the
write-ahead.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from effectusd.backends.migrations import Migration, MigrationError
from effectusd.backends.sqlite.connection import connect
from effectusd.backends.sqlite.migrations import statements
from effectusd.store.operations import lock_sagas_params
from effectusd.store.sql import POSTGRES_STATEMENTS
from tests.support.backends import postgres_query_names, run, sqlite_store_migrations
from tests.support.backends import postgres_store_migrations as postgres_migrations
from tests.support.backends import sqlite_query_names as query_names
from tests.support.backends import sqlite_sql as sql

known_migrations = sqlite_store_migrations.known_migrations
migrate = sqlite_store_migrations.migrate
require_current = sqlite_store_migrations.require_current
status = sqlite_store_migrations.status

DESIGN_TABLES = {
    "effectus_saga_instances",
    "effectus_saga_steps",
    "effectus_saga_outbox",
    "effectus_saga_attempts",
    "effectus_fencing_counters",
    "effectus_fencing_leases",
    "effectus_saga_events",
    "effectus_schema_migrations",
}
NOT_ON_SQLITE = {
    "listen_outbox",
    "listen_saga",
    "open_transaction",
    "migrations_lock",
    "migrations_table_exists",
    "claim_ready",
    "insert_dispatch_claimed",  # the recorder claims in its transaction on PostgreSQL only
}
SQLITE_ONLY = {"claim_due", "claim_mark", "claim_open_attempt"}
EXECUTEMANY = {
    "insert_sagas",
    "settle_attempt",
    "record_late_completion",
    "update_dispatch_settled",
    "keep_step_state",
    "update_saga_state",
    "insert_dispatch",
    "insert_event",
    "claim_open_attempt",
}


def hex64(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


# A pinned plan of one step, as far as the statements read it (keep_step_state).
PLAN = json.dumps(
    {
        "plan_id": "checkout",
        "steps": [
            {
                "id": "charge",
                "sequence": 0,
                "verb": "charge",
                "contract_hash": hex64("contract"),
                "args": {},
                "compensate": {"verb": "refund", "contract_hash": hex64("refund"), "args": {}},
            }
        ],
    }
)


# --- helpers -------------------------------------------------------------------------------


def q(conn: sqlite3.Connection, name: str, params: Any = None) -> list[dict[str, Any]]:
    """Run one named statement in its own write transaction, through the SQLite runner."""

    def operation() -> Any:
        rows = yield (name, {} if params is None else params)
        return rows

    result: list[dict[str, Any]] = run(conn, operation())
    return result


def tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'effectus%'"
    ).fetchall()
    return {row[0] for row in rows}


def dump(path: Path) -> list[str]:
    """The whole database (schema and rows) as SQL text."""
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def count(conn: sqlite3.Connection, table: str) -> int:
    (n,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(n)


def seed_saga(
    conn: sqlite3.Connection,
    name: str = "s1",
    destination: str = "payments",
    not_before: datetime | None = None,
    fencing: str = '["account:1"]',
) -> tuple[str, int]:
    """A running saga with one started step and its queued dispatch: (saga_id, dispatch_id)."""
    saga_id = hex64(name)
    inserted = q(
        conn,
        "insert_saga",
        {
            "saga_id": saga_id,
            "namespace": "default",
            "execution_id": f"order-{name}",
            "plan_id": "checkout",
            "plan_digest": hex64("plan"),
            "plan": PLAN,
            "facts": '{"order":"o-1"}',
            "facts_hash": hex64("facts"),
            "trace_context": None,
        },
    )
    assert inserted == [{"saga_id": saga_id}]
    q(
        conn,
        "insert_dispatch",
        [
            {
                "saga_id": saga_id,
                "effect_id": "charge",
                "direction": "forward",
                "namespace": "default",
                "execution_id": f"order-{name}",
                "destination": destination,
                "verb": "charge",
                "contract_hash": hex64("contract"),
                "delivery": "at_least_once",
                "method": "POST",
                "path": "/charge",
                "args_canonical": '{"amount":1250}',
                "args_hash": hex64("args"),
                "idempotency_key": hex64(f"key-{name}"),
                "fencing_resources": fencing,
                "timeout_ms": 5000,
                "max_attempts": 3,
                "not_before": not_before,
                "enqueued_by": "test",
                "started_from": None,  # its step's start is not carried on the row
                "enqueued_after": None,
            }
        ],
    )
    q(
        conn,
        "insert_event",
        [
            {
                "saga_id": saga_id,
                "effect_id": None,
                "direction": None,
                "attempt": None,
                "kind": "saga_submitted",
                "from_state": None,
                "to_state": "running",
                "actor": "test",
                "evidence": None,
                "detail": '{"plan_id":"checkout"}',
            }
        ],
    )
    (dispatch_id,) = conn.execute(
        "SELECT dispatch_id FROM effectus_saga_outbox WHERE saga_id = ?", (saga_id,)
    ).fetchone()
    return saga_id, int(dispatch_id)


def claim(
    conn: sqlite3.Connection, destination: str, limit: int = 10, margin_s: float = 2.0
) -> list[dict[str, Any]]:
    """The SQLite claim, in one transaction: due rows, mark them, open their attempts."""

    def operation() -> Any:
        due = yield ("claim_due", {"destination": destination, "limit": limit})
        if not due:
            return []
        claimed = yield (
            "claim_mark",
            {
                "dispatch_ids": [row["dispatch_id"] for row in due],
                "owner": "worker-1",
                "margin_s": margin_s,
                "live": {},  # no verb in the loaded config: the row's own limits
            },
        )
        yield (
            "claim_open_attempt",
            [
                {
                    "dispatch_id": row["dispatch_id"],
                    "attempt": row["attempt"],
                    "request_id": f"request-{row['dispatch_id']}-{row['attempt']}",
                    "owner": "worker-1",
                    "lease_token": row["lease_token"],
                    "lease_expires_at": row["lease_expires_at"],
                }
                for row in claimed
            ],
        )
        return claimed

    claimed: list[dict[str, Any]] = run(conn, operation())
    return claimed


def acquire(
    conn: sqlite3.Connection,
    resource: str,
    dispatch_id: int,
    lease_token: str,
    expires_at: datetime,
) -> int | None:
    rows = q(
        conn,
        "acquire_fence",
        {
            "resource": resource,
            "dispatch_id": dispatch_id,
            "lease_token": lease_token,
            "expires_at": expires_at,
        },
    )
    assert len(rows) <= 1
    return rows[0]["token"] if rows else None


def last_token(conn: sqlite3.Connection, resource: str) -> int | None:
    row = conn.execute(
        "SELECT last_token FROM effectus_fencing_counters WHERE resource = ?", (resource,)
    ).fetchone()
    return None if row is None else int(row[0])


def later(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "effectusd.sqlite"


@pytest.fixture
def empty(path: Path) -> Iterator[sqlite3.Connection]:
    conn = connect(path, create=True)
    yield conn
    conn.close()


@pytest.fixture
def conn(empty: sqlite3.Connection) -> sqlite3.Connection:
    migrate(empty)
    return empty


# --- migrate and status ----------------------------------------------------------------------


def test_migrate_creates_every_design_table_and_a_second_migrate_changes_nothing(
    empty: sqlite3.Connection, path: Path
) -> None:
    assert tables(empty) == set()

    applied = migrate(empty)

    assert [(m.version, m.name) for m in applied] == [
        (m.version, m.name) for m in known_migrations()
    ]
    assert tables(empty) >= DESIGN_TABLES
    rows = empty.execute(
        "SELECT version, name, checksum FROM effectus_schema_migrations ORDER BY version"
    ).fetchall()
    assert rows == [(m.version, m.name, m.checksum) for m in known_migrations()]
    before = dump(path)

    assert migrate(empty) == []
    assert dump(path) == before


def test_sqlite_migrations_carry_the_postgresql_versions_and_names() -> None:
    sqlite_names = [(m.version, m.name) for m in known_migrations()]

    assert sqlite_names == [(m.version, m.name) for m in postgres_migrations.known_migrations()]
    assert sqlite_names[0] == (10001, "saga_outbox_v2")


def test_status_before_and_after_migrate_and_it_creates_nothing(
    empty: sqlite3.Connection,
) -> None:
    before = status(empty)

    assert before.applied == []
    assert [m.version for m in before.pending] == [m.version for m in known_migrations()]
    assert before.problems == []
    assert not before.current
    assert tables(empty) == set()
    with pytest.raises(MigrationError, match=r"behind.*10001_saga_outbox_v2"):
        require_current(empty)

    migrate(empty)

    after = status(empty)
    assert after.applied == [m.version for m in known_migrations()]
    assert after.pending == []
    assert after.current
    require_current(empty)  # does not raise


def test_an_applied_migration_whose_file_changed_is_reported_and_refused(
    conn: sqlite3.Connection, path: Path
) -> None:
    conn.execute(
        "UPDATE effectus_schema_migrations SET checksum = ? WHERE version = 10001", ("f" * 64,)
    )
    before = dump(path)

    current = status(conn)

    assert not current.current
    assert any(
        "10001_saga_outbox_v2" in problem and "changed after it was applied" in problem
        for problem in current.problems
    ), current.problems
    with pytest.raises(MigrationError, match="changed after it was applied"):
        require_current(conn)
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(conn)
    assert dump(path) == before
    assert not conn.in_transaction


def test_a_database_newer_than_the_code_is_reported_and_refused(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO effectus_schema_migrations (version, name, checksum) "
        "VALUES (99999, 'from_the_future', ?)",
        ("0" * 64,),
    )

    current = status(conn)

    assert current.problems and "99999_from_the_future" in current.problems[0]
    assert "newer" in current.problems[0]
    with pytest.raises(MigrationError, match="newer"):
        migrate(conn)


def test_a_failing_migration_leaves_nothing_behind_and_earlier_ones_stay(
    empty: sqlite3.Connection,
) -> None:
    known = [
        Migration(1, "first", "CREATE TABLE effectus_first (x INTEGER);\n"),
        Migration(
            2,
            "broken",
            "CREATE TABLE effectus_second (x INTEGER);\nINSERT INTO effectus_nowhere VALUES (1);\n",
        ),
    ]

    with pytest.raises(sqlite3.OperationalError, match="effectus_nowhere"):
        migrate(empty, known)

    assert not empty.in_transaction
    assert "effectus_first" in tables(empty)
    assert "effectus_second" not in tables(empty)
    assert status(empty, known).applied == [1]


def test_statements_keep_a_trigger_body_whole_and_refuse_an_unfinished_file() -> None:
    text = (
        "-- a table\nCREATE TABLE t (x INTEGER);\n"
        "CREATE TRIGGER t_guard BEFORE UPDATE ON t BEGIN\n"
        "    SELECT RAISE(ABORT, 'no; never');\n"
        "    SELECT 1;\n"
        "END;\n-- trailing comment\n"
    )

    found = list(statements(Migration(1, "x", text)))

    assert len(found) == 2
    assert found[1].strip().startswith("CREATE TRIGGER") and found[1].rstrip().endswith("END;")
    with pytest.raises(MigrationError, match="incomplete statement"):
        list(statements(Migration(2, "y", "CREATE TABLE u (x INTEGER)\n")))


# --- the named statements ------------------------------------------------------------------


def test_sqlite_has_every_postgresql_statement_but_the_postgresql_only_ones() -> None:
    expected = {
        name
        for name in postgres_query_names()
        if not name.endswith("_many")  # PostgreSQL's set-based forms; SQLite uses executemany
        and name not in NOT_ON_SQLITE
    }

    assert set(query_names()) == expected | SQLITE_ONLY


def test_every_statement_prepares_against_the_migrated_schema(conn: sqlite3.Connection) -> None:
    failures = {}
    for name in query_names():
        text = sql(name)
        params = dict.fromkeys(re.findall(r":([a-z_]+)", text))
        try:
            conn.execute(f"EXPLAIN {text}", params).fetchall()
        except sqlite3.Error as exc:
            failures[name] = str(exc)

    assert failures == {}


# Statements whose result columns differ from PostgreSQL's on purpose, and inserts whose
# columns cannot be read with NULL parameters (their NOT NULL columns refuse them).
COLUMNS_DIFFER = {
    "health_ping": "only answers",
    "insert_dispatch": "no RETURNING under executemany",
    "notify_outbox": "does nothing",
    "update_saga_state": "PostgreSQL notifies the saga id (Client.wait) in RETURNING",
}
NEED_REAL_ROWS = {
    "acquire_fence",
    "insert_event",
    "insert_saga",
    "insert_sagas",
    "keep_fence_token",
    "migrations_record",
    "probe_schedule",
}


def _postgres_columns(conn: psycopg.Connection[Any], name: str) -> list[str]:
    """The result columns of a PostgreSQL statement, from the server, without running it."""
    text = POSTGRES_STATEMENTS.text(name)
    params: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in params:
            params.append(match.group(1))
        return f"${params.index(match.group(1)) + 1}"

    statement = re.sub(r"%\((\w+)\)s", number, text)
    conn.pgconn.prepare(name.encode(), statement.encode())
    described = conn.pgconn.describe_prepared(name.encode())
    return [(described.fname(i) or b"").decode() for i in range(described.nfields)]


def _sqlite_columns(conn: sqlite3.Connection, name: str) -> list[str]:
    """The result columns of a SQLite statement, run with NULL parameters and rolled back."""
    text = sql(name)
    conn.execute("BEGIN")
    try:
        cursor = conn.execute(text, dict.fromkeys(re.findall(r":([a-z_]+)", text)))
        return [column[0] for column in cursor.description or ()]
    finally:
        conn.execute("ROLLBACK")


@pytest.mark.postgres
def test_result_columns_are_named_as_on_postgresql(
    conn: sqlite3.Connection, database_url: str
) -> None:
    different = {}
    need_rows = set()
    with psycopg.connect(database_url, autocommit=True) as pg:
        for name in sorted(set(query_names()) - SQLITE_ONLY - set(COLUMNS_DIFFER)):
            try:
                columns = _sqlite_columns(conn, name)
            except sqlite3.IntegrityError:
                need_rows.add(name)
                continue
            expected = _postgres_columns(pg, name)
            if columns != expected:
                different[name] = (columns, expected)

    assert different == {}
    assert need_rows == NEED_REAL_ROWS


def test_statements_run_with_executemany_return_no_rows() -> None:
    for name in EXECUTEMANY:
        code = re.sub(r"--[^\n]*", "", sql(name))
        assert "RETURNING" not in code.upper(), name


# --- constraints ---------------------------------------------------------------------------


def test_a_saga_id_must_be_64_lowercase_hex_digits(conn: sqlite3.Connection) -> None:
    for bad in (hex64("x")[:63], hex64("x").upper(), hex64("x")[:63] + "g"):
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute(
                "INSERT INTO effectus_saga_instances (saga_id, namespace, execution_id, plan_id, "
                "plan_digest, plan, facts, facts_hash) VALUES (?, 'n', 'e', 'p', ?, '{}', '{}', ?)",
                (bad, hex64("d"), hex64("f")),
            )
    assert count(conn, "effectus_saga_instances") == 0


def test_json_columns_refuse_text_that_is_not_json(conn: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        q(
            conn,
            "insert_saga",
            {
                "saga_id": hex64("s"),
                "namespace": "n",
                "execution_id": "e",
                "plan_id": "p",
                "plan_digest": hex64("d"),
                "plan": "{not json",
                "facts": "{}",
                "facts_hash": hex64("f"),
                "trace_context": None,
            },
        )
    assert count(conn, "effectus_saga_instances") == 0


def test_an_outbox_lease_is_all_or_nothing(conn: sqlite3.Connection) -> None:
    _, dispatch_id = seed_saga(conn)

    with pytest.raises(sqlite3.IntegrityError, match="effectus_saga_outbox_lease"):
        conn.execute(
            "UPDATE effectus_saga_outbox SET lease_owner = 'worker-1' WHERE dispatch_id = ?",
            (dispatch_id,),
        )


def test_attempt_0_is_only_for_queued_or_canceled_dispatches(conn: sqlite3.Connection) -> None:
    _, dispatch_id = seed_saga(conn)

    with pytest.raises(sqlite3.IntegrityError, match="effectus_saga_outbox_attempted"):
        conn.execute(
            "UPDATE effectus_saga_outbox SET state = 'retry_wait' WHERE dispatch_id = ?",
            (dispatch_id,),
        )
    # PostgreSQL 10002: a dispatch canceled before any claim keeps attempt 0.
    assert q(conn, "op_cancel_dispatch", {"dispatch_id": dispatch_id}) == [
        {"dispatch_id": dispatch_id}
    ]


def test_one_dispatch_per_saga_effect_and_direction(conn: sqlite3.Connection) -> None:
    seed_saga(conn)
    row = conn.execute("SELECT * FROM effectus_saga_outbox").fetchone()
    columns = [
        column[0] for column in conn.execute("SELECT * FROM effectus_saga_outbox").description
    ]
    copy = dict(zip(columns, row, strict=True))
    for key in ("dispatch_id", "created_at", "updated_at", "next_attempt_at"):
        del copy[key]
    copy["idempotency_key"] = "e" * 64
    copy["fencing_resources"] = "[]"

    with pytest.raises(sqlite3.IntegrityError, match=r"saga_id, .*effect_id, .*direction"):
        conn.execute(
            f"INSERT INTO effectus_saga_outbox ({', '.join(copy)}) "
            f"VALUES ({', '.join(':' + name for name in copy)})",
            copy,
        )
    assert count(conn, "effectus_saga_outbox") == 1


# --- fencing -------------------------------------------------------------------------------


def test_a_fencing_counter_cannot_decrease(conn: sqlite3.Connection) -> None:
    conn.execute(
        "INSERT INTO effectus_fencing_counters (resource, last_token) VALUES ('account:a', 5)"
    )

    with pytest.raises(sqlite3.IntegrityError, match="may not decrease"):
        conn.execute(
            "UPDATE effectus_fencing_counters SET last_token = 4 WHERE resource = 'account:a'"
        )
    conn.execute("UPDATE effectus_fencing_counters SET last_token = 6 WHERE resource = 'account:a'")
    assert last_token(conn, "account:a") == 6


def test_fencing_tokens_rise_with_each_grant_and_a_live_lease_is_respected(
    conn: sqlite3.Connection,
) -> None:
    first = acquire(conn, "account:1", 1, "lease-a", later(60))
    assert first is not None
    # another holder, while the lease is live: busy, and nothing changes
    assert acquire(conn, "account:1", 2, "lease-b", later(60)) is None
    assert acquire(conn, "account:1", 1, "lease-other", later(60)) is None
    assert last_token(conn, "account:1") == first
    # the same holder again: a new, higher token
    second = acquire(conn, "account:1", 1, "lease-a", later(-1))
    assert second is not None and second > first
    # that lease has expired: another holder takes it over, with a higher token still
    third = acquire(conn, "account:1", 2, "lease-b", later(60))
    assert third is not None and third > second
    holder = conn.execute(
        "SELECT holder_dispatch_id, holder_lease_token, token FROM effectus_fencing_leases"
    ).fetchall()
    assert holder == [(2, "lease-b", third)]
    assert last_token(conn, "account:1") == third
    # other resources count on their own
    other = acquire(conn, "account:2", 2, "lease-b", later(60))
    assert (last_token(conn, "account:1"), last_token(conn, "account:2")) == (third, other)


def test_a_fencing_token_is_handed_out_once(conn: sqlite3.Connection) -> None:
    tokens = [acquire(conn, "account:1", 1, "lease-a", later(60)) for _ in range(3)]
    assert tokens == sorted({t for t in tokens if t is not None})  # three, each larger
    q(conn, "release_fences", {"dispatch_ids": [1], "lease_tokens": ["lease-a"]})
    assert count(conn, "effectus_fencing_leases") == 0

    for token in (tokens[2], tokens[1]):  # the last one handed out, and an older one
        with pytest.raises(sqlite3.IntegrityError, match="already handed out"):
            conn.execute(
                "INSERT INTO effectus_fencing_leases "
                "(resource, holder_dispatch_id, holder_lease_token, token, expires_at) "
                "VALUES ('account:1', 9, 'lease-z', ?, 0)",
                (token,),
            )
    fourth = acquire(conn, "account:1", 9, "lease-z", later(60))
    assert fourth is not None and fourth > tokens[2]
    with pytest.raises(sqlite3.IntegrityError, match="already handed out"):
        conn.execute(
            "UPDATE effectus_fencing_leases SET token = ? WHERE resource = 'account:1'", (fourth,)
        )
    assert last_token(conn, "account:1") == fourth


def test_release_gives_back_only_the_named_holders(conn: sqlite3.Connection) -> None:
    acquire(conn, "account:1", 1, "lease-a", later(60))
    acquire(conn, "account:2", 2, "lease-b", later(60))
    acquire(conn, "account:3", 3, "lease-c", later(60))

    # (1, lease-b) holds nothing: parallel arrays pair by position
    q(
        conn,
        "release_fences",
        {"dispatch_ids": [1, 3, 1], "lease_tokens": ["lease-a", "lease-c", "lease-b"]},
    )

    left = conn.execute("SELECT resource FROM effectus_fencing_leases").fetchall()
    assert left == [("account:2",)]


def test_fencing_tokens_survive_closing_and_reopening_the_file(
    conn: sqlite3.Connection, path: Path
) -> None:
    acquire(conn, "account:1", 1, "lease-a", later(60))
    before = acquire(conn, "account:1", 1, "lease-a", later(60))
    q(conn, "release_fences", {"dispatch_ids": [1], "lease_tokens": ["lease-a"]})
    conn.close()

    reopened = connect(path)
    try:
        after = acquire(reopened, "account:1", 2, "lease-b", later(60))
    finally:
        reopened.close()
    assert before is not None and after is not None and after > before


# --- the timeline --------------------------------------------------------------------------


def test_saga_events_are_append_only(conn: sqlite3.Connection, path: Path) -> None:
    seed_saga(conn)
    before = dump(path)

    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE effectus_saga_events SET actor = 'someone else'")
    with pytest.raises(sqlite3.IntegrityError, match="leave only with their saga"):
        conn.execute("DELETE FROM effectus_saga_events")

    assert dump(path) == before


def test_a_pruned_saga_takes_its_steps_dispatches_attempts_and_timeline_along(
    conn: sqlite3.Connection,
) -> None:
    doomed, _ = seed_saga(conn, "old")
    kept, _ = seed_saga(conn, "live", destination="other")
    claim(conn, "payments")
    for saga_id in (doomed, kept):  # a kept step state: the only step rows written now
        q(conn, "keep_step_state", [{"saga_id": saga_id, "effect_id": "charge", "state": "failed"}])
    conn.execute(
        "UPDATE effectus_saga_instances SET state = 'completed', finished_at = 1000.0 "
        "WHERE saga_id = ?",
        (doomed,),
    )
    [cutoff] = q(conn, "op_prune_cutoff", {"older_than_s": 60.0})
    assert isinstance(cutoff["cutoff"], datetime)

    preview = q(conn, "op_prune_preview", {"cutoff": cutoff["cutoff"]})
    deleted = q(conn, "op_prune_batch", {"cutoff": cutoff["cutoff"], "limit": 10})

    assert [row["saga_id"] for row in preview] == [doomed]
    assert deleted == [
        {
            "saga_id": doomed,
            "state": "completed",
            "finished_at": datetime.fromtimestamp(1000.0, UTC),
        }
    ]
    for table in ("effectus_saga_steps", "effectus_saga_outbox", "effectus_saga_events"):
        rows = conn.execute(f"SELECT DISTINCT saga_id FROM {table}").fetchall()
        assert rows == [(kept,)], table
    assert count(conn, "effectus_saga_attempts") == 0


def test_op_prune_batch_deletes_at_most_its_limit_oldest_first(conn: sqlite3.Connection) -> None:
    sagas = [seed_saga(conn, f"s{i}")[0] for i in range(3)]
    for finished, saga_id in zip((300.0, 100.0, 200.0), sagas, strict=True):
        conn.execute(
            "UPDATE effectus_saga_instances SET state = 'failed', stop_reason = 'x', "
            "finished_at = ? WHERE saga_id = ?",
            (finished, saga_id),
        )

    first = q(conn, "op_prune_batch", {"cutoff": datetime.fromtimestamp(250.0, UTC), "limit": 1})
    rest = q(conn, "op_prune_batch", {"cutoff": datetime.fromtimestamp(250.0, UTC), "limit": 5})

    assert [row["saga_id"] for row in first] == [sagas[1]]
    assert [row["saga_id"] for row in rest] == [sagas[2]]
    assert count(conn, "effectus_saga_instances") == 1


# --- claim -----------------------------------------------------------------------------------


def test_claim_due_reads_the_partial_ready_index(conn: sqlite3.Connection) -> None:
    plan = conn.execute(
        f"EXPLAIN QUERY PLAN {sql('claim_due')}", {"destination": "payments", "limit": 10}
    ).fetchall()

    details = " ".join(row[3] for row in plan)
    assert "USING INDEX effectus_saga_outbox_ready" in details, details
    assert "TEMP B-TREE" not in details, details  # the index gives the order too
    (definition,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'effectus_saga_outbox_ready'"
    ).fetchone()
    assert "WHERE state IN ('queued', 'retry_wait')" in definition  # terminal rows stay out


def test_claim_due_returns_due_rows_of_its_destination_oldest_first(
    conn: sqlite3.Connection,
) -> None:
    _, second = seed_saga(conn, "a", not_before=later(-20))
    _, first = seed_saga(conn, "b", not_before=later(-30))
    seed_saga(conn, "c", not_before=later(3600))  # not due yet
    seed_saga(conn, "d", destination="elsewhere")

    due = q(conn, "claim_due", {"destination": "payments", "limit": 10})
    one = q(conn, "claim_due", {"destination": "payments", "limit": 1})

    assert due == [
        {"dispatch_id": first, "state": "queued"},
        {"dispatch_id": second, "state": "queued"},
    ]
    assert one == due[:1]


def test_claim_mark_leases_due_rows_once_with_converted_types(conn: sqlite3.Connection) -> None:
    saga_id, dispatch_id = seed_saga(conn)

    [row] = claim(conn, "payments", margin_s=2.0)

    assert row["dispatch_id"] == dispatch_id and row["saga_id"] == saga_id
    assert row["attempt"] == 1
    assert isinstance(row["lease_token"], str) and len(row["lease_token"]) == 32
    assert row["fencing_resources"] == ["account:1"]
    for column in ("lease_expires_at", "created_at", "db_now"):
        assert isinstance(row[column], datetime), column
        assert row[column].tzinfo is not None, column
    assert row["lease_expires_at"] - row["db_now"] == pytest.approx(
        timedelta(seconds=5.0 + 2.0), abs=timedelta(milliseconds=1)
    )
    assert abs(row["db_now"] - datetime.now(UTC)) < timedelta(seconds=60)
    assert set(row) == {
        "dispatch_id", "saga_id", "effect_id", "direction", "execution_id", "destination",
        "verb", "contract_hash", "delivery", "method", "path", "args_canonical", "args_hash",
        "idempotency_key", "fencing_resources", "timeout_ms", "max_attempts", "fence_waits",
        "unsent", "uncertain_attempt", "fence_waiting", "attempt", "lease_token",
        "lease_expires_at", "created_at", "db_now",
    }  # fmt: skip
    # the row is in flight now: neither due nor markable again
    assert q(conn, "claim_due", {"destination": "payments", "limit": 10}) == []
    again = q(
        conn,
        "claim_mark",
        {"dispatch_ids": [dispatch_id], "owner": "worker-2", "margin_s": 2.0, "live": {}},
    )
    assert again == []
    [attempt] = q(conn, "select_saga_attempts", {"saga_id": saga_id})
    assert attempt["lease_owner"] == "worker-1"
    assert attempt["late"] is False
    assert attempt["lease_expires_at"] == row["lease_expires_at"]


def test_lock_statements_give_booleans_and_json(conn: sqlite3.Connection) -> None:
    saga_id, dispatch_id = seed_saga(conn)
    claim(conn, "payments", margin_s=-10.0)  # a lease that has already run out

    [saga] = q(conn, "lock_sagas", lock_sagas_params(dispatch_ids=[dispatch_id]))
    [dispatch] = q(conn, "lock_dispatches", {"dispatch_ids": [dispatch_id]})
    [locked] = q(conn, "lock_sagas", lock_sagas_params(saga_ids=[saga_id]))

    assert saga["cancel_requested"] is False and locked["cancel_requested"] is False
    assert saga["plan"] == json.loads(PLAN)
    assert saga["facts"] == {"order": "o-1"}
    assert dispatch["lease_expired"] is True
    [expired] = q(conn, "select_expired_leases", {"limit": 10})
    assert expired["dispatch_id"] == dispatch_id and expired["sent_at"] is None


# --- write-ahead -----------------------------------------------------------------------------


def test_write_ahead_marks_only_attempts_whose_lease_is_still_ours(
    conn: sqlite3.Connection,
) -> None:
    saga_id, mine = seed_saga(conn, "mine")
    _, stolen = seed_saga(conn, "stolen")
    claims = {row["dispatch_id"]: row for row in claim(conn, "payments")}
    grants = '[{"resource":"account:1","token":7}]'

    marked = q(
        conn,
        "write_ahead",
        {
            "dispatch_ids": [mine, stolen],
            "attempts": [1, 1],
            "lease_tokens": [claims[mine]["lease_token"], "not-the-token"],
            "grants": [grants, "[]"],
            "fencing_statuses": ["propagated", "propagated"],
        },
    )

    assert marked == [{"dispatch_id": mine}]
    [attempt] = q(conn, "select_saga_attempts", {"saga_id": saga_id})
    assert isinstance(attempt["sent_at"], datetime)
    assert attempt["grants"] == [{"resource": "account:1", "token": 7}]
    assert attempt["fencing_status"] == "propagated"
    [dispatch] = q(conn, "select_saga_dispatches", {"saga_id": saga_id})
    assert dispatch["grants"] == [{"resource": "account:1", "token": 7}]
    (stolen_grants,) = conn.execute(
        "SELECT grants FROM effectus_saga_outbox WHERE dispatch_id = ?", (stolen,)
    ).fetchone()
    assert stolen_grants is None
    # a second write-ahead of the same attempt marks nothing
    again = q(
        conn,
        "write_ahead",
        {
            "dispatch_ids": [mine],
            "attempts": [1],
            "lease_tokens": [claims[mine]["lease_token"]],
            "grants": ["[]"],
            "fencing_statuses": ["propagated"],
        },
    )
    assert again == []
    [dispatch] = q(conn, "select_saga_dispatches", {"saga_id": saga_id})
    assert dispatch["grants"] == [{"resource": "account:1", "token": 7}]


# --- parameters that may be NULL -----------------------------------------------------------


def test_null_parameters_mean_what_they_mean_on_postgresql(conn: sqlite3.Connection) -> None:
    saga_id, dispatch_id = seed_saga(conn)
    everything = {
        "states": None,
        "plan_id": None,
        "namespace": None,
        "execution_id": None,
        "destination": None,
        "limit": 100,
    }

    assert len(q(conn, "list_sagas", {**everything, "older_than_s": None})) == 1
    assert q(conn, "list_sagas", {**everything, "older_than_s": 3600.0}) == []
    assert q(conn, "list_sagas", {**everything, "older_than_s": None, "states": ["failed"]}) == []

    claim(conn, "payments")
    (next_before,) = conn.execute(
        "SELECT next_attempt_at FROM effectus_saga_outbox WHERE dispatch_id = ?", (dispatch_id,)
    ).fetchone()
    settled = {
        "dispatch_id": dispatch_id,
        "state": "retry_wait",
        "uncertain_attempt": None,
        "last_outcome": "retryable_failure_known_not_committed",
        "last_error": "boom",
        "result": None,
        "succeeded_order": None,
        "unsent": 0,
        "gives_up_in_s": None,
    }
    q(conn, "update_dispatch_settled", [{**settled, "retry_delay_s": None}])
    (next_after,) = conn.execute(
        "SELECT next_attempt_at FROM effectus_saga_outbox WHERE dispatch_id = ?", (dispatch_id,)
    ).fetchone()
    assert next_after == next_before

    # a forward success's result and order go on its dispatch row (migration 10016), which
    # the step is read from: its own state only where it has no dispatch
    steps = {"saga_ids": json.dumps([saga_id])}
    [row] = q(conn, "select_steps_of_sagas", steps)
    assert (row["direction"], row["state"], row["result"]) == ("forward", "retry_wait", None)
    success = {"state": "succeeded", "last_outcome": "success", "retry_delay_s": None}
    q(
        conn,
        "update_dispatch_settled",
        [{**settled, **success, "result": "null", "succeeded_order": 1}],
    )
    [row] = q(conn, "select_steps_of_sagas", steps)
    assert row["result"] is None and row["succeeded_order"] == 1  # JSON null, read as None
    (stored,) = conn.execute("SELECT result IS NOT NULL FROM effectus_saga_outbox").fetchone()
    assert stored  # not SQL NULL: the result of a success is there, and it is JSON null
    q(
        conn,
        "update_dispatch_settled",
        [{**settled, **success, "result": '{"ok":1}', "succeeded_order": 2}],
    )
    [row] = q(conn, "select_steps_of_sagas", steps)
    assert (row["result"], row["succeeded_order"], row["uncertain"]) == ({"ok": 1}, 2, False)
    # a kept state (a step that failed at enqueue has no dispatch) makes its row, its pins
    # the plan's; a second one updates it
    q(conn, "keep_step_state", [{"saga_id": saga_id, "effect_id": "charge", "state": "failed"}])
    kept = (
        "SELECT effect_id, sequence, verb, contract_hash, compensation, state"
        " FROM effectus_saga_steps"
    )
    assert conn.execute(kept).fetchall() == [
        (
            "charge",
            0,
            "charge",
            hex64("contract"),
            json.loads(PLAN)["steps"][0]["compensate"],
            "failed",
        )
    ]
    q(conn, "keep_step_state", [{"saga_id": saga_id, "effect_id": "charge", "state": "pending"}])
    assert [r[-1] for r in conn.execute(kept).fetchall()] == ["pending"]
    rows = q(conn, "select_steps_of_sagas", steps)
    assert sorted((r["direction"] or "step", r["state"]) for r in rows) == [
        ("forward", "succeeded"),
        ("step", "pending"),
    ]


# --- recording outcomes ----------------------------------------------------------------------


def test_recorder_statements_settle_once_and_keep_late_evidence(conn: sqlite3.Connection) -> None:
    saga_id, dispatch_id = seed_saga(conn)
    [first] = claim(conn, "payments")
    outcome = {
        "dispatch_id": dispatch_id,
        "attempt": 1,
        "outcome": "unknown_outcome",
        "status_code": None,
        "error": "timeout",
        "evidence": '{"elapsed_ms":5000}',
    }
    settle = {
        **outcome,
        "settled_by": "executor",
        "fencing_status": None,
        "saga_id": saga_id,
        "settled_to": "retry_wait",  # the attempt row carries the settlement's timeline entry
        "settled_actor": "engine",
        "settled_step": None,  # the step move, if any, is a stored event
        "settled_saga": None,  # and so is the saga's move
    }
    q(conn, "settle_attempt", [settle])
    q(conn, "settle_attempt", [{**settle, "outcome": "success", "settled_to": "succeeded"}])
    entry = conn.execute(
        "SELECT settled_to, settled_actor, settled_after FROM effectus_saga_attempts"
        " WHERE dispatch_id = ? AND attempt = 1",
        (dispatch_id,),
    ).fetchone()
    (last_event,) = conn.execute("SELECT max(event_id) FROM effectus_saga_events").fetchone()
    assert entry == ("retry_wait", "engine", last_event)  # placed after the saga's last event
    q(
        conn,
        "update_dispatch_settled",
        [
            {
                "dispatch_id": dispatch_id,
                "state": "retry_wait",
                "retry_delay_s": -1.0,
                "uncertain_attempt": 1,
                "last_outcome": "unknown_outcome",
                "last_error": "timeout",
                "result": None,
                "succeeded_order": None,
                "unsent": 0,
                "gives_up_in_s": None,
            }
        ],
    )
    [second] = claim(conn, "payments")
    assert second["attempt"] == 2 and second["lease_token"] != first["lease_token"]
    q(
        conn,
        "write_ahead",
        {
            "dispatch_ids": [dispatch_id],
            "attempts": [2],
            "lease_tokens": [second["lease_token"]],
            "grants": ["[]"],
            "fencing_statuses": ["not_requested"],
        },
    )

    reported = q(
        conn, "select_completion_attempts", {"dispatch_ids": [dispatch_id], "attempts": [1]}
    )
    assert reported == [
        {
            "dispatch_id": dispatch_id,
            "attempt": 1,
            "settled_by": "executor",
            "sent": False,
            "lease_token": first["lease_token"],  # the row's own lease, not the second's
            "later_sent": True,
        }
    ]
    (outcome_kept,) = conn.execute(
        "SELECT outcome FROM effectus_saga_attempts WHERE dispatch_id = ? AND attempt = 1",
        (dispatch_id,),
    ).fetchone()
    assert outcome_kept == "unknown_outcome"  # the second settle found it settled already
    q(conn, "record_late_completion", [{**outcome, "outcome": "success", "status_code": 200}])
    attempts = q(conn, "select_saga_attempts", {"saga_id": saga_id})
    assert [(a["attempt"], a["late"], a["late_outcome"]) for a in attempts] == [
        (1, True, "success"),
        (2, False, None),
    ]
    assert isinstance(attempts[0]["late_at"], datetime)
    assert attempts[0]["evidence"] == {"elapsed_ms": 5000}


def test_saga_state_updates_and_the_compensation_reason(conn: sqlite3.Connection) -> None:
    saga_id, _ = seed_saga(conn)
    again = q(
        conn,
        "insert_saga",
        {
            "saga_id": saga_id,
            "namespace": "default",
            "execution_id": "order-s1",
            "plan_id": "checkout",
            "plan_digest": hex64("plan"),
            "plan": "{}",
            "facts": "{}",
            "facts_hash": hex64("facts"),
            "trace_context": None,
        },
    )
    assert again == []  # the same identity inserts nothing

    def timeline(to_state: str, detail: str) -> dict[str, Any]:
        return {
            "saga_id": saga_id,
            "effect_id": None,
            "direction": None,
            "attempt": None,
            "kind": "saga_state",
            "from_state": None,
            "to_state": to_state,
            "actor": "test",
            "evidence": None,
            "detail": detail,
        }

    def compensation_reason() -> Any:
        [locked] = q(conn, "lock_sagas", lock_sagas_params(saga_ids=[saga_id]))
        return locked["compensation_reason"]

    q(
        conn,
        "insert_event",
        [
            timeline("compensating", '{"reason":"first"}'),
            timeline("compensating", '{"other":1}'),
            timeline("blocked_unknown", '{"reason":"not this one"}'),
        ],
    )
    assert compensation_reason() is None  # read only while the saga is blocked

    q(conn, "update_saga_state", [{"saga_id": saga_id, "state": "failed", "stop_reason": "no"}])
    [failed] = q(conn, "select_saga", {"saga_id": saga_id})
    q(conn, "update_saga_state", [{"saga_id": saga_id, "state": "running", "stop_reason": "x"}])
    [running] = q(conn, "select_saga", {"saga_id": saga_id})

    assert (failed["state"], failed["stop_reason"], failed["revision"]) == ("failed", "no", 2)
    assert isinstance(failed["finished_at"], datetime)
    assert (running["stop_reason"], running["finished_at"], running["revision"]) == (
        None,
        None,
        3,
    )
    [cancel] = q(conn, "op_request_cancel", {"saga_id": saga_id, "actor": "ops"})
    assert isinstance(cancel["cancel_requested_at"], datetime)
    assert q(conn, "op_request_cancel", {"saga_id": saga_id, "actor": "ops"}) == []
    blocked = {"saga_id": saga_id, "state": "blocked_unknown", "stop_reason": "b"}
    q(conn, "update_saga_state", [blocked])
    assert compensation_reason() == "first"


def test_the_gauges_and_the_wait_for_the_next_due_row(conn: sqlite3.Connection) -> None:
    assert q(conn, "next_due", {"destinations": ["payments"]}) == [{"seconds": None}]
    assert q(conn, "metrics_ready_queue") == [{"depth": 0, "oldest_s": 0.0}]
    seed_saga(conn, "due", not_before=later(-30))
    seed_saga(conn, "soon", not_before=later(600))
    seed_saga(conn, "elsewhere", destination="other", not_before=later(-60))

    [wait] = q(conn, "next_due", {"destinations": ["payments"]})
    [ready] = q(conn, "metrics_ready_queue")
    [counts] = q(conn, "outbox_counts", {"horizon_s": 60.0})
    [wider] = q(conn, "outbox_counts", {"horizon_s": 3600.0})
    claim(conn, "payments")
    [claimed] = q(conn, "outbox_counts", {"horizon_s": 60.0})

    assert wait["seconds"] == pytest.approx(-30.0, abs=5.0)
    assert ready["depth"] == 2 and ready["oldest_s"] == pytest.approx(60.0, abs=5.0)
    assert counts == {"in_flight": 0, "due_soon": 2}
    assert wider == {"in_flight": 0, "due_soon": 3}
    assert claimed == {"in_flight": 1, "due_soon": 1}
    assert q(conn, "metrics_live_sagas") == [{"state": "running", "n": 3}]
