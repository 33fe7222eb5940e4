"""The claim path reads only live rows: with a large backlog of finished dispatches, the claim
and next-due queries use their partial indexes instead of scanning the outbox; the recorder's
locked reads touch only their batch's rows, whether the tables have statistics or not."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import psycopg
import pytest

from effectusd.backends.postgres.runner import with_array_texts
from effectusd.backends.postgres.session import PoolSession
from effectusd.store.operations import lock_sagas_params
from effectusd.store.sql import POSTGRES_STATEMENTS as STORE_STATEMENTS
from tests.support.backends import postgres_sql as sql

pytestmark = pytest.mark.postgres

TERMINAL_ROWS = 200_000
HEX = "lpad(to_hex(g), 64, '0')"

BACKLOG = f"""
INSERT INTO effectus_saga_instances
    (saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash, state,
     finished_at)
SELECT {HEX}, 'default', 'e' || g, 'p', repeat('a', 64), '{{}}', '{{}}', repeat('b', 64),
       'completed', now()
FROM generate_series(1, %(n)s) AS g;
INSERT INTO effectus_saga_steps (saga_id, effect_id, sequence, verb, contract_hash, args,
                                 args_hash, state)
SELECT {HEX}, 's', 0, 'v', repeat('c', 64), '{{}}', repeat('d', 64), 'succeeded'
FROM generate_series(1, %(n)s) AS g;
INSERT INTO effectus_saga_outbox
    (saga_id, effect_id, direction, namespace, execution_id, destination, verb, contract_hash,
     delivery, method, path, args_canonical, args_hash, idempotency_key, timeout_ms,
     max_attempts, state, attempt, next_attempt_at)
SELECT {HEX}, 's', 'forward', 'default', 'e' || g, 'dest', 'v', repeat('c', 64),
       'at_most_once', 'POST', '/', '{{}}', repeat('d', 64), {HEX}, 1000, 5,
       CASE WHEN g %% %(ready_every)s = 0 THEN 'queued' ELSE 'succeeded' END,
       CASE WHEN g %% %(ready_every)s = 0 THEN 0 ELSE 1 END, now() - interval '1 minute'
FROM generate_series(1, %(n)s) AS g
"""
ANALYZE = b"ANALYZE effectus_saga_instances, effectus_saga_steps, effectus_saga_outbox"
CLAIM = {  # what the daemon's claim passes: free slots, owner, lease margin, live verb limits
    "destinations": ["dest"],
    "limits": [16],
    "total": 16,
    "owner": "o",
    "margin_s": 1.0,
    "verbs": ["work"],
    "timeouts_ms": [1000],
    "max_attempts": [3],
    "contract_hashes": ["a" * 64],
    "legacy_hashes": ["b" * 64],
    "write_ahead": True,
    "namespace": None,  # the one store's daemon: every row
}
# A daemon serving several stores claims its namespace's rows in each (the backlog's: 'default')
CLAIM_IN_NAMESPACE = {**CLAIM, "namespace": "default"}


def plan_of(conn: psycopg.Connection, query: str, params: dict[str, object]) -> str:
    rows = conn.execute(b"EXPLAIN " + query.encode(), params).fetchall()  # type: ignore[arg-type]
    return "\n".join(row[0] for row in rows)


def load_backlog(conn: psycopg.Connection, ready_every: int, analyze: bool = True) -> None:
    for statement in BACKLOG.split(";"):
        if statement.strip():
            conn.execute(
                statement.encode(),  # type: ignore[arg-type]
                {"n": TERMINAL_ROWS, "ready_every": ready_every},
            )
    if analyze:
        conn.execute(ANALYZE)


def claim_plan(conn: psycopg.Connection) -> str:
    return plan_of(
        conn,
        sql("claim_ready").as_string(conn),
        CLAIM,
    )


def test_claim_and_next_due_use_the_ready_index_over_a_large_finished_backlog(db: str) -> None:
    with psycopg.connect(db) as conn:  # one transaction, rolled back: nothing is left behind
        load_backlog(conn, ready_every=10_000)
        claim = claim_plan(conn)
        due = plan_of(
            conn, sql("next_due").as_string(conn), {"destinations": ["dest"], "namespace": None}
        )
        expired = plan_of(conn, sql("select_expired_leases").as_string(conn), {"limit": 10})
        conn.rollback()
    assert "effectus_saga_outbox_ready" in claim, claim
    assert "Seq Scan on effectus_saga_outbox" not in claim, claim
    assert "effectus_saga_outbox_ready" in due, due
    assert "effectus_saga_outbox_leased" in expired, expired


def test_a_claim_in_one_namespace_takes_its_rows_alone_through_the_ready_index(db: str) -> None:
    # Several stores: each store's claim names its namespace; rows of another namespace in the
    # same database are filtered from the ready index's rows, never claimed.
    with psycopg.connect(db) as conn:  # one transaction, rolled back: nothing is left behind
        load_backlog(conn, ready_every=10_000)
        ours = conn.execute(
            "UPDATE effectus_saga_outbox SET namespace = 'other'"
            " WHERE state = 'queued' AND (dispatch_id / 10000) % 2 = 0 RETURNING dispatch_id"
        ).fetchall()
        query = sql("claim_ready").as_string(conn)
        plan = plan_of(conn, query, CLAIM_IN_NAMESPACE)
        due = plan_of(
            conn, sql("next_due").as_string(conn), {"destinations": ["dest"], "namespace": "x"}
        )
        claimed = conn.execute(query.encode(), CLAIM_IN_NAMESPACE).fetchall()  # type: ignore[arg-type]
        conn.rollback()
    assert "effectus_saga_outbox_ready" in plan, plan
    assert "Seq Scan on effectus_saga_outbox" not in plan, plan
    assert "effectus_saga_outbox_ready" in due, due
    others = {row[0] for row in ours}
    assert others and len(claimed) == 10  # the 20 ready rows, half of them another namespace's
    assert not others & {row[0] for row in claimed}


def test_claiming_from_a_large_ready_backlog_touches_only_the_claimed_rows(db: str) -> None:
    # With many ready rows the planner guesses the claimed set as a share of them and would
    # join it to the whole outbox (a sequential scan per claim); the claim must lease its rows
    # by primary key instead, whatever the backlog.
    with psycopg.connect(db) as conn:
        load_backlog(conn, ready_every=2)
        claim = claim_plan(conn)
        conn.rollback()
    assert "Seq Scan on effectus_saga_outbox" not in claim, claim
    assert "Index Cond: (dispatch_id = ANY ($" in claim, claim  # the claimed ids, by key


def rows_read(conn: psycopg.Connection, query: str, params: dict[str, object]) -> int:
    """The most rows any node of the query's plan produced when it ran (over all its loops)."""
    explain = b"EXPLAIN (ANALYZE, FORMAT JSON) " + query.encode()
    [[document]] = conn.execute(explain, params).fetchall()  # type: ignore[arg-type]
    return walk(document[0]["Plan"])[0]


def walk(plan: dict[str, Any]) -> tuple[int, str]:
    """(the most rows any node produced over all its loops, the nodes and what they read)."""
    nodes, most, read = [plan], 0, []
    while nodes:
        node = nodes.pop()
        most = max(most, node["Actual Rows"] * node["Actual Loops"])
        read.append(f"{node['Node Type']} {node.get('Relation Name', '')}")
        nodes.extend(node.get("Plans", []))
    return int(most), "; ".join(read)


def recorder_reads(conn: psycopg.Connection, batch: int) -> dict[str, dict[str, object]]:
    """The recorder's locked reads (statement: parameters) for ``batch`` outbox rows."""
    rows = conn.execute(
        "SELECT dispatch_id, saga_id FROM effectus_saga_outbox"
        " ORDER BY dispatch_id OFFSET 1000 LIMIT %s",
        (batch,),
    ).fetchall()
    dispatch_ids, saga_ids = [r[0] for r in rows], [r[1] for r in rows]
    return {
        "lock_sagas": lock_sagas_params(dispatch_ids=dispatch_ids),
        "lock_dispatches": {"dispatch_ids": dispatch_ids, "saga_ids": saga_ids},
        "select_steps_of_sagas": {"saga_ids": saga_ids},
        "select_completion_attempts": {"dispatch_ids": dispatch_ids, "attempts": [1] * batch},
    }


def test_the_recorders_locked_reads_touch_only_their_batch_over_a_large_backlog(db: str) -> None:
    # Without statistics a literal list of 256 ids looks like "every row" to the planner: the
    # steps read joined the whole outbox's forward rows, 60,000 of them per record in a drain
    # (docs/performance.md, A 100,000-saga backlog). Read before and after ANALYZE.
    batch = 256
    with psycopg.connect(db) as conn:  # one transaction, rolled back: nothing is left behind
        load_backlog(conn, ready_every=10_000, analyze=False)
        reads = recorder_reads(conn, batch)
        touched = {}
        for statistics in ("never analyzed", "analyzed"):
            if statistics == "analyzed":
                conn.execute(ANALYZE)
            for name, params in reads.items():
                touched[statistics, name] = rows_read(conn, sql(name).as_string(conn), params)
        conn.rollback()
    assert all(n <= 2 * batch for n in touched.values()), touched


SMALL_SAGAS = f"""
INSERT INTO effectus_saga_instances
    (saga_id, namespace, execution_id, plan_id, plan_digest, plan, facts, facts_hash, state)
SELECT {HEX}, 'default', 'e' || g, 'p', repeat('a', 64), '{{}}', '{{}}', repeat('b', 64),
       'running'
FROM generate_series(1, %(n)s) AS g;
INSERT INTO effectus_saga_outbox
    (saga_id, effect_id, direction, namespace, execution_id, destination, verb, contract_hash,
     delivery, method, path, args_canonical, args_hash, idempotency_key, timeout_ms,
     max_attempts, state, attempt, next_attempt_at)
SELECT {HEX}, 's0', 'forward', 'default', 'e' || g, 'dest', 'v', repeat('c', 64),
       'at_most_once', 'POST', '/', '{{}}', repeat('d', 64), {HEX}, 1000, 5, 'queued', 0,
       now()
FROM generate_series(1, %(n)s) AS g
"""


def test_the_steps_read_looks_each_sagas_dispatches_up_by_key_in_a_small_young_store(
    db: str,
) -> None:
    # The bench's shape: a few thousand five-step sagas (as submitted: no step rows, their
    # steps are their plans'), never analyzed. The planner once joined every step of the
    # batch to every dispatch of the batch (Materialize, 750 x 150 rows) instead of looking
    # each saga's dispatches up by its key.
    sagas, batch = 1_000, 150
    with psycopg.connect(db) as conn:  # one transaction, rolled back: nothing is left behind
        for statement in SMALL_SAGAS.split(";"):
            conn.execute(statement.encode(), {"n": sagas})  # type: ignore[arg-type]
        saga_ids = [
            row[0]
            for row in conn.execute(
                "SELECT saga_id FROM effectus_saga_instances ORDER BY saga_id LIMIT %s", (batch,)
            )
        ]
        query = sql("select_steps_of_sagas").as_string(conn)
        read = rows_read(conn, query, {"saga_ids": saga_ids})
        found = conn.execute(query.encode(), {"saga_ids": saga_ids}).fetchall()  # type: ignore[arg-type]
        conn.rollback()
    # each saga's first step's dispatch, and no step row
    assert sorted({(row[1], row[2], row[3]) for row in found}) == [("s0", "forward", "queued")]
    assert len(found) == batch
    assert read <= batch, read


def generic_plan_read(
    conn: psycopg.Connection, query: str, params: Mapping[str, Any]
) -> tuple[int, str]:
    """How the daemon runs ``query`` (its connections plan generically: session.py): run as a
    prepared statement with a generic plan, the plan auto_explain reports for the second
    call, as (the most rows any node produced over all its loops, the node types and
    relations it read)."""
    plans: list[str] = []

    def keep(notice: psycopg.errors.Diagnostic) -> None:
        plans.append(notice.message_primary or "")

    conn.add_notice_handler(keep)
    conn.execute("LOAD 'auto_explain'")
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_analyze = on",
        "auto_explain.log_format = json",
        "client_min_messages = log",
        "plan_cache_mode = force_generic_plan",
    ):
        conn.execute(f"SET LOCAL {setting}".encode())  # type: ignore[arg-type]
    try:
        for _ in range(2):
            conn.execute(query.encode(), params, prepare=True)  # type: ignore[arg-type]
    finally:
        conn.remove_notice_handler(keep)
    return walk(json.loads(plans[-1].split("plan:", 1)[1])["Plan"])


def test_the_daemons_generic_plans_read_only_their_rows_over_a_large_backlog(db: str) -> None:
    # Generic plans are made without the parameters' values: the claim does not know how many
    # rows it asks for, the locked reads not how many ids they get. Each must still find its
    # rows by key or through the ready index, before ANALYZE and after.
    batch = 256
    with psycopg.connect(db) as conn:  # one transaction, rolled back: nothing is left behind
        load_backlog(conn, ready_every=2, analyze=False)
        statements: dict[str, Mapping[str, Any]] = {
            "claim_ready": CLAIM,
            "claim_ready (one namespace)": CLAIM_IN_NAMESPACE,
            "next_due": {"destinations": ["dest"], "namespace": None},
            "next_due (one namespace)": {"destinations": ["dest"], "namespace": "default"},
            "select_expired_leases": {"limit": 10},
            **recorder_reads(conn, batch),
        }
        found = {}
        for statistics in ("never analyzed", "analyzed"):
            if statistics == "analyzed":
                conn.execute(ANALYZE)
            for name, params in statements.items():
                query = sql(name.split(" ")[0]).as_string(conn)
                found[statistics, name] = generic_plan_read(conn, query, with_array_texts(params))
        conn.rollback()
    for (statistics, name), (most, read) in found.items():
        assert most <= 2 * batch, (statistics, name, most, read)
        assert "Seq Scan effectus_saga_outbox" not in read, (statistics, name, read)
        assert "Seq Scan effectus_saga_steps" not in read, (statistics, name, read)


async def test_the_daemons_connections_plan_each_statement_once(db: str) -> None:
    session = await PoolSession.open(db, STORE_STATEMENTS, 1, 2)
    try:
        async with session.pool.connection() as conn:
            cursor = await conn.execute("SHOW plan_cache_mode")
            assert await cursor.fetchone() == ("force_generic_plan",)
    finally:
        await session.close()


# A probe row for every finished dispatch, all closed (asked, settled or given up): what years
# of blocked sagas leave behind.
CLOSED_PROBES = b"""
INSERT INTO effectus_dispatch_probes (dispatch_id, attempt, probes, next_probe_at, last_status)
SELECT dispatch_id, 1, 3, NULL, 404 FROM effectus_saga_outbox WHERE state = 'succeeded'
"""


def test_the_probe_loop_reads_only_blocked_dispatches_and_due_probes(db: str) -> None:
    with psycopg.connect(db) as conn:  # one transaction, rolled back: nothing is left behind
        load_backlog(conn, ready_every=10_000, analyze=False)
        conn.execute(CLOSED_PROBES)
        conn.execute(ANALYZE + b", effectus_dispatch_probes")
        unscheduled = plan_of(
            conn, sql("probe_unscheduled").as_string(conn), {"verbs": ["v"], "limit": 32}
        )
        take = plan_of(
            conn,
            sql("probe_take").as_string(conn),
            {"limit": 32, "verbs": ["v"], "hold_s": [60.0], "max_probes": [20]},
        )
        pending = plan_of(conn, sql("probe_pending").as_string(conn), {"verbs": ["v"]})
        orphans = plan_of(
            conn,
            sql("probe_orphans").as_string(conn),
            {"verbs": ["v"], "limit": 32, "grace_s": 600.0},
        )
        conn.rollback()
    assert "effectus_saga_outbox_blocked_unknown" in unscheduled, unscheduled
    assert "Seq Scan" not in unscheduled, unscheduled
    assert "effectus_dispatch_probes_due" in take, take
    assert "Seq Scan" not in take, take
    assert "effectus_dispatch_probes_due" in pending, pending  # --until-idle's question
    assert "Seq Scan" not in pending, pending
    assert "effectus_dispatch_probes_due" in orphans, orphans  # probes of a removed config
    assert "Seq Scan" not in orphans, orphans
