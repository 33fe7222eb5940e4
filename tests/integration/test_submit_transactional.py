"""Submitting sagas through the transactional outbox, against a real PostgreSQL.

The plan and config below use the inputs of the docs/design.md section 2 vectors (namespace
``default``, execution ``order-7``, plan ``checkout``, first step ``charge`` with arguments
``{"order":"o-1","currency":"EUR","amount":1250}``), so the rows a submit writes can be pinned
to the published identities.

Every refused input is checked twice: the error names the problem, and no effectus_* table
changed (row counts and contents).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql as psql
from psycopg.rows import dict_row

from effectusd import Plan, compensate, fact, no_compensation, result
from effectusd import step as plan_step
from effectusd.client import AsyncClient, Client
from effectusd.config import Config, parse_config
from effectusd.core.canonical import canonical_bytes, canonical_hash
from effectusd.core.checker import PlanCheckError, check
from effectusd.core.identity import argument_hash, idempotency_key, saga_id
from effectusd.core.states import Direction
from effectusd.core.submission import SubmitConflict, SubmitError

VECTOR_SAGA_ID = "53c4d5234ab09a8d5912898c4e385b0a86809796ccca87c3959d7755085345f8"
VECTOR_FORWARD_KEY = "8574e6019624ecdc867c223762cb0e8f2f1bca2924d07b3563fd0c977bbbab6e"
VECTOR_ARGS = '{"amount":1250,"currency":"EUR","order":"o-1"}'
VECTOR_ARGS_HASH = "c15a5ceb896021e05f9224fdba000d9c5dfb42b47fe52db99e0e8d3699ab34d4"

CONFIG: dict[str, Any] = {
    "namespace": "default",
    "destinations": {
        "payments": {"base_url": "http://127.0.0.1:9", "timeout": "3s"},
        "warehouse": {"base_url": "http://127.0.0.1:9"},
    },
    "verbs": {
        "payments.charge": {
            "destination": "payments",
            "path": "/orders/{args.order}/charges",
            "delivery": "at_least_once",
            "fencing": ["order:{args.order}"],
            "retry": {"max_attempts": 4},
            "args_schema": {
                "type": "object",
                "properties": {
                    "order": {"type": "string"},
                    "currency": {"type": "string"},
                    "amount": {"type": "integer", "minimum": 1},
                },
                "required": ["order", "currency", "amount"],
            },
        },
        "payments.refund": {"destination": "payments", "path": "/refunds"},
        "warehouse.ship": {"destination": "warehouse", "path": "/shipments"},
        "warehouse.receipt": {"destination": "warehouse", "path": "/receipts"},
    },
}

PLAN: dict[str, Any] = {
    "plan_id": "checkout",
    "facts": {"order": "string", "amount": "integer"},
    "steps": [
        {
            "id": "charge",
            "verb": "payments.charge",
            "args": {"order": {"$fact": "order"}, "currency": "EUR", "amount": {"$fact": "amount"}},
            "compensate": {
                "verb": "payments.refund",
                "args": {"charge_id": {"$result": "charge", "path": "/charge_id"}},
            },
        },
        {
            "id": "ship",
            "verb": "warehouse.ship",
            "args": {"order": {"$fact": "order"}, "charge": {"$result": "charge"}},
            "compensate": "none",
        },
        {
            "id": "receipt",
            "verb": "warehouse.receipt",
            "args": {"order": {"$fact": "order"}},
            "compensate": "none",
        },
    ],
}
FACTS: dict[str, Any] = {"order": "o-1", "amount": 1250}
EXECUTION = "order-7"
APP_TABLE = "submit_app_orders"


# --- helpers and fixtures --------------------------------------------------------------------


def plan() -> dict[str, Any]:
    return copy.deepcopy(PLAN)


def facts() -> dict[str, Any]:
    return dict(FACTS)


def builder_plan() -> Plan:
    """PLAN written with the Python builder: the same plan, so the same digest."""
    return Plan(
        "checkout",
        facts={"order": str, "amount": int},
        steps=[
            plan_step(
                "charge",
                "payments.charge",
                {"order": fact("order"), "currency": "EUR", "amount": fact("amount")},
                compensate=compensate(
                    "payments.refund", {"charge_id": result("charge", "/charge_id")}
                ),
            ),
            plan_step(
                "ship",
                "warehouse.ship",
                {"order": fact("order"), "charge": result("charge")},
                compensate=no_compensation,
            ),
            plan_step(
                "receipt", "warehouse.receipt", {"order": fact("order")}, compensate=no_compensation
            ),
        ],
    )


@pytest.fixture
def config() -> Config:
    return parse_config(copy.deepcopy(CONFIG))


@pytest.fixture
def client(config: Config, db: str) -> Client:
    return Client(config, database_url=db)


@pytest.fixture
def app_table(db: str) -> Iterator[str]:
    """An application table of our own, so the outbox can be tested against real app writes."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {APP_TABLE}")
        conn.execute(f"CREATE TABLE {APP_TABLE} (order_id text PRIMARY KEY)")
    yield APP_TABLE
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {APP_TABLE}")


def effectus_tables(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables "
            "WHERE schemaname = current_schema() AND tablename LIKE 'effectus\\_%' "
            "ORDER BY tablename"
        ).fetchall()
    return [row[0] for row in rows]


def snapshot(url: str) -> dict[str, tuple[int, str]]:
    """Row count and a digest of the contents of every effectus_* table."""
    tables = effectus_tables(url)
    assert len(tables) >= 8, tables
    result = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            query = psql.SQL(
                "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                "FROM {} AS t"
            ).format(psql.Identifier(table))
            count, digest = conn.execute(query).fetchone()  # type: ignore[misc]
            result[table] = (count, digest)
    return result


def counts(url: str) -> dict[str, int]:
    return {table: count for table, (count, _) in snapshot(url).items()}


def fetch(url: str, query: str, params: Any = None) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def app_rows(url: str) -> list[str]:
    return [row["order_id"] for row in fetch(url, f"SELECT order_id FROM {APP_TABLE} ORDER BY 1")]


def wait_for_lock_waiters(url: str, count: int = 1, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if row is not None and row[0] >= count:
                return
    pytest.fail("the concurrent submit never waited on the first transaction")


def redigested(document: dict[str, Any]) -> dict[str, Any]:
    """A checked-plan document with its digest recomputed over its (edited) content."""
    body = {key: value for key, value in document.items() if key != "plan_digest"}
    return {**document, "plan_digest": canonical_hash(body)}


# --- the transactional outbox ----------------------------------------------------------------


def test_submit_rolled_back_with_the_application_transaction_leaves_nothing(
    client: Client, db: str, app_table: str
) -> None:
    before = snapshot(db)

    with psycopg.connect(db) as conn:
        conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        result = client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
        assert result.created
        conn.rollback()

    assert snapshot(db) == before
    assert app_rows(db) == []
    assert client.get(result.saga_id) is None


def test_submit_committed_with_the_application_transaction_writes_saga_and_dispatch(
    client: Client, config: Config, db: str, app_table: str
) -> None:
    with psycopg.connect(db) as conn:
        conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        result = client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
        conn.commit()

    checked = check(plan(), config.verbs)
    assert result.created
    assert result.saga_id == VECTOR_SAGA_ID == saga_id("default", EXECUTION, "checkout")
    assert app_rows(db) == ["o-1"]

    (saga,) = fetch(db, "SELECT * FROM effectus_saga_instances")
    assert saga["saga_id"] == VECTOR_SAGA_ID
    assert (saga["namespace"], saga["execution_id"], saga["plan_id"]) == (
        "default",
        EXECUTION,
        "checkout",
    )
    assert saga["state"] == "running"
    assert saga["plan_digest"] == checked.plan_digest
    assert saga["plan"] == checked.document()
    assert saga["facts"] == FACTS
    assert saga["facts_hash"] == canonical_hash(FACTS)
    assert saga["finished_at"] is None

    # No step row: a step is read from the pinned plan above, the first one's start from its
    # queued dispatch below (effectusd/core/steps.py, migration 10018).
    assert fetch(db, "SELECT count(*) AS n FROM effectus_saga_steps") == [{"n": 0}]

    (dispatch,) = fetch(db, "SELECT * FROM effectus_saga_outbox")
    assert dispatch["effect_id"] == "charge"
    assert dispatch["direction"] == "forward"
    assert dispatch["state"] == "queued"
    assert dispatch["attempt"] == 0
    expected_key = idempotency_key("default", VECTOR_SAGA_ID, "charge", Direction.FORWARD)
    assert dispatch["idempotency_key"] == expected_key == VECTOR_FORWARD_KEY
    expected_args = canonical_bytes({"order": "o-1", "currency": "EUR", "amount": 1250})
    assert dispatch["args_canonical"].encode("utf-8") == expected_args
    assert dispatch["args_canonical"] == VECTOR_ARGS
    assert dispatch["args_hash"] == argument_hash(expected_args) == VECTOR_ARGS_HASH
    assert dispatch["destination"] == "payments"
    assert dispatch["verb"] == "payments.charge"
    assert dispatch["contract_hash"] == config.verbs["payments.charge"].contract_hash
    assert dispatch["delivery"] == "at_least_once"
    assert dispatch["method"] == "POST"
    assert dispatch["path"] == "/orders/o-1/charges"
    assert dispatch["fencing_resources"] == ["order:o-1"]
    assert dispatch["timeout_ms"] == 3000
    assert dispatch["max_attempts"] == 4
    assert dispatch["lease_owner"] is None
    assert dispatch["lease_token"] is None
    assert dispatch["lease_expires_at"] is None
    assert dispatch["next_attempt_at"] <= datetime.now(UTC) + timedelta(seconds=5)
    assert fetch(db, "SELECT * FROM effectus_saga_attempts") == []


def test_submit_records_the_submission_and_the_enqueue_on_the_timeline(
    client: Client, config: Config, db: str
) -> None:
    client.submit(plan(), execution_id=EXECUTION, facts=facts(), actor="user:alice")

    view = client.get(VECTOR_SAGA_ID)
    assert view is not None
    events = [event.model_dump() for event in view.timeline]
    assert [event["kind"] for event in events] == ["saga_submitted", "dispatch_enqueued"]
    submitted, enqueued = events
    # the enqueue's entry is its outbox row (enqueued_by): only the submission is an event
    [stored] = fetch(db, "SELECT * FROM effectus_saga_events ORDER BY event_id")
    assert (stored["event_id"], stored["kind"]) == (submitted["event_id"], "saga_submitted")
    assert stored["saga_id"] == VECTOR_SAGA_ID
    assert submitted["to_state"] == "running"
    assert submitted["actor"] == "user:alice"
    assert submitted["detail"]["plan_digest"] == check(plan(), config.verbs).plan_digest
    assert (enqueued["effect_id"], enqueued["direction"], enqueued["to_state"]) == (
        "charge",
        "forward",
        "queued",
    )
    assert enqueued["detail"]["idempotency_key"] == VECTOR_FORWARD_KEY
    assert enqueued["actor"] == "user:alice"


def test_submit_as_the_first_statement_of_the_application_transaction_rolls_back_with_it(
    client: Client, db: str, app_table: str
) -> None:
    before = snapshot(db)

    with psycopg.connect(db) as conn:
        client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
        conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        conn.rollback()

    assert app_rows(db) == []
    assert snapshot(db) == before


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param("invalid_plan", id="invalid-plan"),
        pytest.param("conflict", id="conflicting-resubmit"),
    ],
)
def test_refused_submit_inside_the_application_transaction_does_not_abort_it(
    client: Client, db: str, app_table: str, refusal: str
) -> None:
    client.submit(plan(), execution_id=EXECUTION, facts=facts())
    before = snapshot(db)

    with psycopg.connect(db) as conn:
        conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        if refusal == "invalid_plan":
            bad = plan()
            bad["steps"][0]["verb"] = "payments.chrage"
            with pytest.raises(PlanCheckError, match="unknown verb"):
                client.submit(bad, execution_id="order-8", facts=facts(), conn=conn)
        else:
            with pytest.raises(SubmitConflict, match="facts differ"):
                client.submit(
                    plan(), execution_id=EXECUTION, facts={**FACTS, "amount": 1}, conn=conn
                )
        conn.execute(f"INSERT INTO {app_table} VALUES ('o-2')")
        conn.commit()

    assert app_rows(db) == ["o-1", "o-2"]
    assert snapshot(db) == before


def test_outbox_notify_is_delivered_only_after_commit(
    client: Client, db: str, app_table: str
) -> None:
    with psycopg.connect(db, autocommit=True) as listener:
        listener.execute("LISTEN effectus_outbox")
        with psycopg.connect(db) as conn:
            conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
            client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            conn.commit()
        delivered = list(listener.notifies(timeout=10, stop_after=1))

    assert [(n.channel, n.payload) for n in delivered] == [("effectus_outbox", "payments")]


class RecordingCursor(psycopg.Cursor[Any]):
    """Keeps the text of every statement it sends."""

    sent: list[str]

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        RecordingCursor.sent.append(self._text(query))
        return super().execute(query, params, **kwargs)

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        RecordingCursor.sent.append(self._text(query))
        super().executemany(query, params_seq, **kwargs)

    def _text(self, query: Any) -> str:
        return query.as_string(self) if hasattr(query, "as_string") else str(query)


def test_the_outbox_rows_wake_their_destination_in_the_statement_that_writes_them(
    client: Client, db: str
) -> None:
    # One round trip fewer per submit: no statement of its own for the NOTIFY.
    RecordingCursor.sent = []
    with psycopg.connect(db, autocommit=True) as listener:
        listener.execute("LISTEN effectus_outbox")
        with psycopg.connect(db, cursor_factory=RecordingCursor) as conn:
            client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
            conn.commit()
        delivered = list(listener.notifies(timeout=10, stop_after=1))

    notifying = [text for text in RecordingCursor.sent if "pg_notify" in text]
    assert len(notifying) == 1, RecordingCursor.sent
    assert "INSERT INTO effectus_saga_outbox" in notifying[0]
    assert [(n.channel, n.payload) for n in delivered] == [("effectus_outbox", "payments")]


def test_outbox_notify_is_not_delivered_after_rollback(
    client: Client, db: str, app_table: str
) -> None:
    with psycopg.connect(db, autocommit=True) as listener:
        listener.execute("LISTEN effectus_outbox")
        with psycopg.connect(db) as conn:
            conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
            client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
            conn.rollback()
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []


# --- idempotent resubmission and conflicts ----------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        "same-raw-plan",
        "facts-in-another-order",
        "checked-document",
        "checked-plan-object",
        "python-builder-plan",
    ],
)
def test_resubmitting_the_same_saga_reports_created_false_and_changes_nothing(
    client: Client, config: Config, db: str, form: str
) -> None:
    first = client.submit(plan(), execution_id=EXECUTION, facts=facts())
    before = snapshot(db)
    checked = check(plan(), config.verbs)
    again_plan: Any = {
        "same-raw-plan": plan(),
        "facts-in-another-order": plan(),
        "checked-document": checked.document(),
        "checked-plan-object": checked,
        "python-builder-plan": builder_plan(),
    }[form]
    again_facts = dict(reversed(list(FACTS.items())))

    again = client.submit(again_plan, execution_id=EXECUTION, facts=again_facts)

    assert first.created
    assert not again.created
    assert again.saga_id == first.saga_id
    assert snapshot(db) == before
    assert counts(db)["effectus_saga_instances"] == 1


def test_resubmitting_with_different_facts_is_a_conflict_and_changes_nothing(
    client: Client, db: str
) -> None:
    client.submit(plan(), execution_id=EXECUTION, facts=facts())
    before = snapshot(db)

    with pytest.raises(SubmitConflict) as conflict:
        client.submit(plan(), execution_id=EXECUTION, facts={**FACTS, "amount": 999})

    assert "facts differ" in str(conflict.value)
    assert VECTOR_SAGA_ID in str(conflict.value)
    assert "plan digest" not in str(conflict.value)
    assert snapshot(db) == before


def test_resubmitting_with_a_different_plan_digest_is_a_conflict_and_changes_nothing(
    client: Client, db: str
) -> None:
    client.submit(plan(), execution_id=EXECUTION, facts=facts())
    before = snapshot(db)
    changed = plan()
    changed["steps"][0]["args"]["currency"] = "USD"

    with pytest.raises(SubmitConflict) as conflict:
        client.submit(changed, execution_id=EXECUTION, facts=facts())

    assert "plan digest" in str(conflict.value)
    assert "facts differ" not in str(conflict.value)
    assert snapshot(db) == before


def test_concurrent_identical_submit_waits_for_the_first_and_then_reports_it_exists(
    client: Client, db: str, app_table: str
) -> None:
    with ThreadPoolExecutor(max_workers=1) as pool, psycopg.connect(db) as first:
        first.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        assert client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=first).created
        second = pool.submit(client.submit, plan(), execution_id=EXECUTION, facts=facts())
        wait_for_lock_waiters(db)
        first.commit()
        result = second.result(timeout=30)

    assert not result.created
    assert counts(db)["effectus_saga_instances"] == 1
    assert counts(db)["effectus_saga_outbox"] == 1


def test_concurrent_identical_submit_creates_the_saga_when_the_first_rolls_back(
    client: Client, db: str, app_table: str
) -> None:
    with ThreadPoolExecutor(max_workers=1) as pool, psycopg.connect(db) as first:
        first.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=first)
        second = pool.submit(client.submit, plan(), execution_id=EXECUTION, facts=facts())
        wait_for_lock_waiters(db)
        first.rollback()
        result = second.result(timeout=30)

    assert result.created
    assert counts(db)["effectus_saga_instances"] == 1
    assert counts(db)["effectus_saga_outbox"] == 1
    assert app_rows(db) == []


# --- refused input -----------------------------------------------------------------------------

Mutation = Callable[[dict[str, Any], dict[str, Any], Config], dict[str, Any]]


def _submit_args(p: Any, f: Any, execution_id: str = EXECUTION) -> dict[str, Any]:
    return {"plan": p, "facts": f, "execution_id": execution_id}


def _with_arg(step: int, name: str, value: Any) -> Mutation:
    def mutate(p: dict[str, Any], f: dict[str, Any], _: Config) -> dict[str, Any]:
        p["steps"][step]["args"][name] = value
        return _submit_args(p, f)

    return mutate


def _with_fact(name: Any, value: Any) -> Mutation:
    def mutate(p: dict[str, Any], f: dict[str, Any], _: Config) -> dict[str, Any]:
        f[name] = value
        return _submit_args(p, f)

    return mutate


def _without_fact(name: str) -> Mutation:
    def mutate(p: dict[str, Any], f: dict[str, Any], _: Config) -> dict[str, Any]:
        del f[name]
        return _submit_args(p, f)

    return mutate


def _with_step_field(step: int, field: str, value: Any) -> Mutation:
    def mutate(p: dict[str, Any], f: dict[str, Any], _: Config) -> dict[str, Any]:
        p["steps"][step][field] = value
        return _submit_args(p, f)

    return mutate


def _without_compensate(p: dict[str, Any], f: dict[str, Any], _: Config) -> dict[str, Any]:
    del p["steps"][1]["compensate"]
    return _submit_args(p, f)


def _malformed(p: dict[str, Any], f: dict[str, Any], _: Config) -> dict[str, Any]:
    p["steps"] = "charge, then ship"
    return _submit_args(p, f)


def _checked_with_edited_digest(p: dict[str, Any], f: dict[str, Any], c: Config) -> dict[str, Any]:
    document = check(p, c.verbs).document()
    document["plan_digest"] = "0" * 64
    return _submit_args(document, f)


def _checked_with_edited_args(p: dict[str, Any], f: dict[str, Any], c: Config) -> dict[str, Any]:
    document = check(p, c.verbs).document()
    document["steps"][0]["args"]["currency"] = "USD"
    return _submit_args(document, f)


def _execution(execution_id: str) -> Mutation:
    def mutate(p: dict[str, Any], f: dict[str, Any], _: Config) -> dict[str, Any]:
        return _submit_args(p, f, execution_id)

    return mutate


BAD_INPUT = [
    pytest.param(_malformed, PlanCheckError, ["steps", "valid list"], id="malformed-plan"),
    pytest.param(
        _with_step_field(1, "verb", "warehouse.shpi"),
        PlanCheckError,
        ["steps[1].verb", "unknown verb 'warehouse.shpi'"],
        id="unknown-verb",
    ),
    pytest.param(
        _with_step_field(2, "id", "ship"),
        PlanCheckError,
        ["steps[2].id", "duplicate step id 'ship'"],
        id="duplicate-step-id",
    ),
    pytest.param(
        _with_step_field(0, "id", "bad id"),
        PlanCheckError,
        ["steps[0].id", "'bad id'"],
        id="malformed-step-id",
    ),
    pytest.param(
        _with_arg(1, "later", {"$result": "receipt"}),
        PlanCheckError,
        ["steps[1].args.later", "'receipt', which does not run before this one"],
        id="result-pointing-forward",
    ),
    pytest.param(
        _with_arg(1, "self", {"$result": "ship"}),
        PlanCheckError,
        ["steps[1].args.self", "does not run before this one"],
        id="result-pointing-at-itself",
    ),
    pytest.param(
        _with_arg(1, "ghost", {"$result": "refund"}),
        PlanCheckError,
        ["steps[1].args.ghost", "missing step 'refund'"],
        id="result-to-missing-step",
    ),
    pytest.param(
        _with_arg(2, "coupon", {"$fact": "coupon"}),
        PlanCheckError,
        ["steps[2].args.coupon", "fact 'coupon' is not declared"],
        id="undeclared-fact",
    ),
    pytest.param(
        _with_fact("amount", "1250"),
        PlanCheckError,
        ["facts.amount", "expected integer, got str"],
        id="wrong-fact-type",
    ),
    pytest.param(
        _with_fact("amount", True),
        PlanCheckError,
        ["facts.amount", "expected integer, got bool"],
        id="bool-is-not-an-integer-fact",
    ),
    pytest.param(
        _without_fact("amount"),
        PlanCheckError,
        ["facts.amount", "missing"],
        id="missing-fact",
    ),
    pytest.param(
        _with_fact("coupon", "SPRING"),
        PlanCheckError,
        ["facts.coupon", "not declared by the plan"],
        id="fact-not-declared-by-the-plan",
    ),
    pytest.param(
        _with_arg(2, "ratio", math.nan),
        PlanCheckError,
        ["steps[2].args.ratio", "NaN is not JSON"],
        id="nan-in-args",
    ),
    pytest.param(
        _with_fact("amount", math.nan),
        PlanCheckError,
        ["facts.amount", "NaN is not JSON"],
        id="nan-fact",
    ),
    pytest.param(
        _with_arg(2, "ratio", math.inf),
        PlanCheckError,
        ["steps[2].args.ratio", "Infinity is not JSON"],
        id="infinity-in-args",
    ),
    pytest.param(
        _with_fact("amount", -math.inf),
        PlanCheckError,
        ["facts.amount", "Infinity is not JSON"],
        id="minus-infinity-fact",
    ),
    pytest.param(
        _with_fact("amount", 2**60),
        PlanCheckError,
        ["facts.amount", "integer outside ±(2^53-1)"],
        id="2**60-fact",
    ),
    pytest.param(
        _with_arg(2, "big", 2**60),
        PlanCheckError,
        ["steps[2].args.big", "integer outside ±(2^53-1)"],
        id="2**60-in-args",
    ),
    pytest.param(
        _with_arg(2, "meta", {1: "x"}),
        PlanCheckError,
        ["steps[2].args.meta", "object key of type int is not a string"],
        id="non-string-key-in-args",
    ),
    pytest.param(
        _with_fact(1, "x"),
        PlanCheckError,
        ["facts", "object key of type int is not a string"],
        id="non-string-key-in-facts",
    ),
    pytest.param(
        _with_arg(2, "note", "\ud800"),
        PlanCheckError,
        ["steps[2].args.note", "lone surrogate"],
        id="lone-surrogate-in-args",
    ),
    pytest.param(
        _with_fact("order", "o-\ud800"),
        PlanCheckError,
        ["facts.order", "lone surrogate"],
        id="lone-surrogate-fact",
    ),
    pytest.param(
        _without_compensate,
        PlanCheckError,
        ["steps[1].compensate", "missing", '"none"'],
        id="missing-compensate",
    ),
    pytest.param(
        _with_arg(0, "amount", 0),
        PlanCheckError,
        ["steps[0].args.amount", "schema"],
        id="literal-violating-the-verb-schema",
    ),
    pytest.param(
        _checked_with_edited_digest,
        PlanCheckError,
        ["plan_digest", "does not match"],
        id="checked-plan-with-edited-digest",
    ),
    pytest.param(
        _checked_with_edited_args,
        PlanCheckError,
        ["plan_digest", "edited after checking"],
        id="checked-plan-with-edited-args",
    ),
    pytest.param(
        _execution("order 7"), SubmitError, ["execution_id", "without spaces"], id="space-in-id"
    ),
    pytest.param(_execution(""), SubmitError, ["execution_id", "1..200"], id="empty-execution-id"),
    pytest.param(
        _execution("o" * 201), SubmitError, ["execution_id", "1..200"], id="long-execution-id"
    ),
    pytest.param(
        _with_fact("amount", 0),
        SubmitError,
        ["step 'charge' (forward)", "amount", "minimum"],
        id="resolved-args-violating-the-verb-schema",
    ),
    pytest.param(
        _with_fact("order", "o/1"),
        SubmitError,
        ["step 'charge' (forward)", "args.order: not allowed as a path segment"],
        id="slash-in-a-path-segment",
    ),
    pytest.param(
        _with_fact("order", ".."),
        SubmitError,
        ["step 'charge' (forward)", "args.order: not allowed as a path segment"],
        id="dot-dot-path-segment",
    ),
]


@pytest.mark.parametrize(("mutate", "error", "fragments"), BAD_INPUT)
def test_bad_input_is_refused_naming_the_problem_and_changes_nothing(
    client: Client,
    config: Config,
    db: str,
    mutate: Mutation,
    error: type[Exception],
    fragments: list[str],
) -> None:
    client.submit(plan(), execution_id="order-1", facts=facts())
    before = snapshot(db)
    arguments = mutate(plan(), facts(), config)

    with pytest.raises(error) as refused:
        client.submit(
            arguments["plan"], execution_id=arguments["execution_id"], facts=arguments["facts"]
        )

    for fragment in fragments:
        assert fragment in str(refused.value)
    assert snapshot(db) == before


@pytest.mark.parametrize("as_object", [False, True], ids=["document", "object"])
def test_checked_plan_refused_after_contract_drift_and_changes_nothing(
    config: Config, db: str, as_object: bool
) -> None:
    checked = check(plan(), config.verbs)
    drifted_config = copy.deepcopy(CONFIG)
    drifted_config["verbs"]["payments.charge"]["version"] = 2
    drifted = Client(parse_config(drifted_config), database_url=db)
    drifted.submit(plan(), execution_id="order-1", facts=facts())
    before = snapshot(db)

    with pytest.raises(PlanCheckError) as refused:
        drifted.submit(
            checked if as_object else checked.document(), execution_id=EXECUTION, facts=facts()
        )

    assert "steps[0].contract_hash" in str(refused.value)
    assert "'payments.charge' changed since the plan was checked" in str(refused.value)
    assert "contract drift" in str(refused.value)
    assert snapshot(db) == before


FORGED_EDITS = [
    pytest.param(
        lambda d: d["steps"][2]["args"].__setitem__("coupon", {"$fact": "coupon"}),
        "steps[2].args.coupon: fact 'coupon' is not declared",
        id="undeclared-fact-in-a-later-step",
    ),
    pytest.param(
        lambda d: d["steps"][1]["args"].__setitem__("later", {"$result": "receipt"}),
        "steps[1].args.later: $result refers to step 'receipt'",
        id="forward-result-in-a-later-step",
    ),
    pytest.param(
        lambda d: d["steps"][2].__setitem__("id", "bad id"),
        "steps[2].id: step id 'bad id'",
        id="malformed-step-id",
    ),
    pytest.param(
        lambda d: d["steps"][2].__setitem__("id", "ship"),
        "steps[2].id: duplicate step id 'ship'",
        id="duplicate-step-id",
    ),
    pytest.param(
        lambda d: d["steps"][1].__setitem__("sequence", 5),
        "plan_digest",
        id="edited-sequence",
    ),
]


@pytest.mark.parametrize(("edit", "problem"), FORGED_EDITS)
def test_checked_plan_edited_and_redigested_is_still_checked_at_submit(
    client: Client,
    config: Config,
    db: str,
    edit: Callable[[dict[str, Any]], None],
    problem: str,
) -> None:
    """The digest is a plain content hash anyone can recompute: submit must re-check content."""
    client.submit(plan(), execution_id="order-1", facts=facts())
    before = snapshot(db)
    document = check(plan(), config.verbs).document()
    edit(document)

    with pytest.raises(PlanCheckError) as refused:
        client.submit(redigested(document), execution_id=EXECUTION, facts=facts())

    assert problem in str(refused.value)
    assert snapshot(db) == before


# --- scheduling and reading back ---------------------------------------------------------------


def test_not_before_in_the_future_sets_next_attempt_at(client: Client, db: str) -> None:
    not_before = datetime(2999, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)

    result = client.submit(plan(), execution_id=EXECUTION, facts=facts(), not_before=not_before)

    (dispatch,) = fetch(db, "SELECT state, next_attempt_at FROM effectus_saga_outbox")
    assert dispatch == {"state": "queued", "next_attempt_at": not_before}
    view = client.get(result.saga_id)
    assert view is not None
    assert view.steps[0].dispatches[0].next_attempt_at == not_before
    printed = view.model_dump(mode="json")  # what sagas show --json prints
    assert printed["steps"][0]["dispatches"][0]["next_attempt_at"] == not_before.isoformat()


def test_get_returns_steps_then_dispatches_then_attempts_and_the_timeline(
    client: Client, db: str
) -> None:
    result = client.submit(plan(), execution_id=EXECUTION, facts=facts())
    # Simulate a claim of the first dispatch so the view has an attempt to nest.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE effectus_saga_outbox SET state = 'in_flight', attempt = 1, "
            "lease_owner = 'worker-1', lease_token = gen_random_uuid(), "
            "lease_expires_at = now() + interval '1 minute'"
        )
        conn.execute(
            "INSERT INTO effectus_saga_attempts (dispatch_id, attempt, request_id, lease_owner, "
            "lease_token, lease_expires_at, fencing_status) "
            "SELECT dispatch_id, 1, gen_random_uuid(), lease_owner, lease_token, "
            "lease_expires_at, 'propagated' FROM effectus_saga_outbox"
        )

    view = client.get(result.saga_id)

    assert view is not None
    json.dumps(view.model_dump(mode="json"))  # the CLI prints it as JSON
    assert view.saga_id == VECTOR_SAGA_ID
    assert (view.execution_id, view.plan_id, view.state) == (
        EXECUTION,
        "checkout",
        "running",
    )
    assert view.facts == FACTS
    assert [step.effect_id for step in view.steps] == ["charge", "ship", "receipt"]
    assert [step.sequence for step in view.steps] == [0, 1, 2]
    assert [step.has_compensation for step in view.steps] == [True, False, False]
    charge, ship, receipt = view.steps
    assert ship.dispatches == [] and receipt.dispatches == []
    (dispatch,) = charge.dispatches
    assert (dispatch.direction, dispatch.state, dispatch.attempt) == (
        "forward",
        "in_flight",
        1,
    )
    assert dispatch.idempotency_key == VECTOR_FORWARD_KEY
    (attempt,) = dispatch.attempts
    assert attempt.attempt == 1
    assert attempt.fencing_status == "propagated"
    assert attempt.outcome is None and attempt.sent_at is None
    assert attempt.completed_at is None
    # the claim's entry is its attempt row, read as the timeline's dispatch_claimed
    assert [(event.kind, event.actor) for event in view.timeline] == [
        ("saga_submitted", "client"),
        ("dispatch_enqueued", "client"),
        ("dispatch_claimed", "worker-1"),
    ]


def test_get_of_an_unknown_saga_returns_none(client: Client) -> None:
    assert client.get("0" * 64) is None


def test_list_returns_sagas_of_the_requested_state(client: Client, db: str) -> None:
    running = client.submit(plan(), execution_id="order-1", facts=facts()).saga_id
    done = client.submit(plan(), execution_id="order-2", facts=facts()).saga_id
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE effectus_saga_instances SET state = 'completed', finished_at = now() "
            "WHERE saga_id = %s",
            (done,),
        )

    assert {row.saga_id for row in client.list()} == {running, done}
    assert [row.saga_id for row in client.list(state="running")] == [running]
    assert [row.saga_id for row in client.list(state="completed")] == [done]
    assert client.list(plan_id="other") == []


# --- AsyncClient ---------------------------------------------------------------------------------


async def test_async_submit_rolled_back_with_the_application_transaction_leaves_nothing(
    config: Config, db: str, app_table: str
) -> None:
    client = AsyncClient(config, database_url=db)
    before = snapshot(db)

    async with await psycopg.AsyncConnection.connect(db) as conn:
        await conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        result = await client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
        assert result.created
        await conn.rollback()

    assert snapshot(db) == before
    assert app_rows(db) == []
    assert await client.get(result.saga_id) is None


async def test_async_submit_committed_with_the_application_transaction_leaves_the_saga(
    config: Config, db: str, app_table: str
) -> None:
    client = AsyncClient(config, database_url=db)

    async with await psycopg.AsyncConnection.connect(db) as conn:
        await conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        result = await client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
        await conn.commit()

    assert result.saga_id == VECTOR_SAGA_ID
    assert app_rows(db) == ["o-1"]
    view = await client.get(result.saga_id)
    assert view is not None
    assert view.state == "running"
    assert [step.state for step in view.steps] == ["in_progress", "pending", "pending"]
    (dispatch,) = view.steps[0].dispatches
    assert (dispatch.state, dispatch.attempt, dispatch.idempotency_key) == (
        "queued",
        0,
        VECTOR_FORWARD_KEY,
    )


async def test_async_submit_as_the_first_statement_rolls_back_with_the_application(
    config: Config, db: str, app_table: str
) -> None:
    client = AsyncClient(config, database_url=db)
    before = snapshot(db)

    async with await psycopg.AsyncConnection.connect(db) as conn:
        await client.submit(plan(), execution_id=EXECUTION, facts=facts(), conn=conn)
        await conn.execute(f"INSERT INTO {app_table} VALUES ('o-1')")
        await conn.rollback()

    assert snapshot(db) == before


async def test_async_resubmit_with_different_facts_is_a_conflict(config: Config, db: str) -> None:
    client = AsyncClient(config, database_url=db)
    await client.submit(plan(), execution_id=EXECUTION, facts=facts())
    before = snapshot(db)

    with pytest.raises(SubmitConflict, match="facts differ"):
        await client.submit(plan(), execution_id=EXECUTION, facts={**FACTS, "amount": 2})

    assert snapshot(db) == before
