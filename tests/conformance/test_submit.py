"""Identity and submit: idempotent on the same identity, conflicts write nothing, and a submit
inside the caller's transaction lives or dies with it."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

from effectusd.backends.sqlite.connection import connect as sqlite_connect
from effectusd.client import AsyncClient
from effectusd.core.identity import saga_id as derive_saga_id
from effectusd.core.states import OutcomeClass
from effectusd.core.submission import SubmitConflict
from effectusd.store import operations
from tests.conformance.support import StoreUnderTest, dispatch_in, step, step_states, timeline
from tests.support import backends
from tests.support.harness import serial_plan


def counts(store: StoreUnderTest) -> dict[str, int]:
    tables = ("saga_instances", "saga_steps", "saga_outbox", "saga_attempts", "saga_events")
    return {t: store.execute(f"SELECT count(*) FROM effectus_{t}")[0][0] for t in tables}


def test_submit_creates_the_saga_its_first_dispatch_and_the_timeline(
    store: StoreUnderTest,
) -> None:
    plan = serial_plan("checkout", ["pay", "pay"], {"s1": "undo"})
    result = store.client().submit(plan, execution_id="order-7", facts={})
    assert result.created is True
    assert result.saga_id == derive_saga_id("default", "order-7", "checkout")

    view = store.view(result.saga_id)
    assert (view["state"], view["execution_id"], view["plan_id"]) == (
        "running",
        "order-7",
        "checkout",
    )
    assert [(s["effect_id"], s["sequence"], s["state"]) for s in view["steps"]] == [
        ("s1", 0, "in_progress"),
        ("s2", 1, "pending"),
    ]
    first = dispatch_in(view, "s1")
    assert (first["state"], first["attempt"], first["attempts"]) == ("queued", 0, [])
    assert first["idempotency_key"] and len(first["idempotency_key"]) == 64
    assert view["steps"][1]["dispatches"] == []  # the next step is enqueued when s1 succeeds
    assert timeline(view) == [
        ("saga_submitted", None, None, None, None, "running"),
        ("dispatch_enqueued", "s1", "forward", None, None, "queued"),
    ]
    assert [row["saga_id"] for row in store.run(operations.list_sagas())] == [result.saga_id]


def test_the_same_identity_is_not_created_twice(store: StoreUnderTest) -> None:
    plan = serial_plan("checkout", ["pay"])
    first = store.client().submit(plan, execution_id="order-7", facts={})
    before = counts(store)
    again = store.client().submit(plan, execution_id="order-7", facts={})
    assert (first.created, again.created) == (True, False)
    assert again.saga_id == first.saga_id
    assert counts(store) == before  # not one row more, not even an event


def test_different_facts_or_plan_under_the_same_identity_conflict_and_write_nothing(
    store: StoreUnderTest,
) -> None:
    plan = {**serial_plan("checkout", ["pay"]), "facts": {"amount": "integer"}}
    store.client().submit(plan, execution_id="order-7", facts={"amount": 1})
    before = counts(store)

    with pytest.raises(SubmitConflict, match="facts"):
        store.client().submit(plan, execution_id="order-7", facts={"amount": 2})
    changed_plan = {**serial_plan("checkout", ["pay_alo"]), "facts": {"amount": "integer"}}
    with pytest.raises(SubmitConflict, match="plan digest"):
        store.client().submit(changed_plan, execution_id="order-7", facts={"amount": 1})
    assert counts(store) == before

    other = store.client().submit(plan, execution_id="order-8", facts={"amount": 2})
    assert other.created  # a different execution id is a different saga


def _own_transaction(store: StoreUnderTest) -> psycopg.Connection | sqlite3.Connection:
    """A connection whose transaction the caller (the test) controls."""
    if store.sqlite:
        conn = sqlite_connect(backends.sqlite_path(store.url))  # autocommit mode
        conn.execute("BEGIN")  # the application's own transaction
        return conn
    return psycopg.connect(store.url)  # not autocommit: psycopg opens the transaction


@pytest.mark.parametrize("ending", ["rollback", "commit"])
def test_a_submit_inside_the_callers_transaction_commits_or_rolls_back_with_it(
    store: StoreUnderTest, ending: str
) -> None:
    conn = _own_transaction(store)
    try:
        result = store.client().submit(
            serial_plan("checkout", ["pay"]), execution_id="order-7", conn=conn
        )
        assert result.created
        # inside the transaction the saga is there (the submit did write, into it) ...
        view = backends.run(conn, operations.load_saga(result.saga_id))
        assert view is not None and view.state == "running"
        if isinstance(conn, sqlite3.Connection):
            conn.execute(ending.upper())
        else:
            getattr(conn, ending)()
    finally:
        conn.close()

    # ... and afterwards it exists only if the caller committed
    stored = store.run(operations.load_saga(result.saga_id))
    if ending == "rollback":
        assert stored is None
        assert counts(store) == dict.fromkeys(counts(store), 0)
    else:
        assert (
            stored is not None
            and dispatch_in(stored.model_dump(mode="json"), "s1")["state"] == "queued"
        )


def test_a_conflict_inside_the_callers_transaction_leaves_it_usable(
    store: StoreUnderTest,
) -> None:
    plan = {**serial_plan("checkout", ["pay"]), "facts": {"amount": "integer"}}
    existing = store.client().submit(plan, execution_id="order-7", facts={"amount": 1})
    conn = _own_transaction(store)
    try:
        with pytest.raises(SubmitConflict):
            store.client().submit(plan, execution_id="order-7", facts={"amount": 2}, conn=conn)
        # only the submit's own savepoint was rolled back: the caller goes on and commits
        other = store.client().submit(plan, execution_id="order-8", facts={"amount": 3}, conn=conn)
        if isinstance(conn, sqlite3.Connection):
            conn.execute("COMMIT")
        else:
            conn.commit()
    finally:
        conn.close()
    assert {row["saga_id"] for row in store.run(operations.list_sagas())} == {
        existing.saga_id,
        other.saga_id,
    }
    assert store.view(existing.saga_id)["facts"] == {"amount": 1}


async def test_the_async_client_submits_reads_and_waits_alike(store: StoreUnderTest) -> None:
    client = AsyncClient(store.config, database_url=store.url)
    plan = serial_plan("checkout", ["pay"])
    first = await client.submit(plan, execution_id="order-7")
    again = await client.submit(plan, execution_id="order-7")
    assert (first.created, again.created, again.saga_id) == (True, False, first.saga_id)
    view = await client.get(first.saga_id)
    assert view is not None and view.model_dump(mode="json") == store.view(first.saga_id)
    assert await client.get("0" * 64) is None
    daemon = await store.dispatch_store()
    await step(daemon, OutcomeClass.UNKNOWN)
    waited = await client.wait(first.saga_id, timeout=5)
    assert waited.state == "blocked_unknown"


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"k": value}
    return value


FACT_PLAN = {
    "plan_id": "limits",
    "facts": {"doc": "object", "account": "string"},
    "steps": [
        {"id": "s1", "verb": "pay", "args": {"doc": {"$fact": "doc"}}, "compensate": "none"},
        {
            "id": "s2",
            "verb": "fenced",
            "args": {"n": {"$fact": "account"}},
            "compensate": "none",
        },
    ],
}


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        ({"doc": _nested(980), "account": "a-1"}, "nests deeper than 64 levels"),
        ({"doc": _nested(100_000), "account": "a-1"}, "nests deeper than 64 levels"),
        ({"doc": {"k": "x" * 1_048_576}, "account": "a-1"}, "over the limit of 1048576"),
        ({"doc": {}, "account": "SECRET" + "x" * 6000}, "over the limit of 256"),
    ],
    ids=["980-levels", "100000-levels", "over-1MiB", "6000-char-fencing-resource"],
)
def test_facts_past_a_limit_are_refused_at_submit_and_nothing_is_written(
    store: StoreUnderTest, facts: dict[str, object], reason: str
) -> None:
    with pytest.raises(ValueError) as refused:  # PlanCheckError or SubmitError
        store.client().submit(FACT_PLAN, execution_id="order-7", facts=facts)

    assert reason in str(refused.value)
    assert "SECRET" not in str(refused.value)
    assert counts(store) == dict.fromkeys(counts(store), 0)


def test_facts_at_the_limits_are_stored_and_read_back(store: StoreUnderTest) -> None:
    # The facts object is level 1 and so is s1's arguments object: "doc" may nest 63 levels.
    facts = {"doc": _nested(63), "account": "a" * (256 - len("res:"))}
    result = store.client().submit(FACT_PLAN, execution_id="order-7", facts=facts)

    view = store.view(result.saga_id)
    assert view["facts"] == facts


def chain(plan_id: str, s2_reads: str) -> dict[str, Any]:
    """s1, s2, s3, s2 reading s1's result at ``s2_reads``; s1 and s2 undone."""
    return {
        "plan_id": plan_id,
        "steps": [
            {"id": "s1", "verb": "pay", "args": {}, "compensate": {"verb": "undo", "args": {}}},
            {
                "id": "s2",
                "verb": "pay",
                "args": {"r": {"$result": "s1", "path": s2_reads}},
                "compensate": {"verb": "undo", "args": {}},
            },
            {"id": "s3", "verb": "pay", "args": {}, "compensate": "none"},
        ],
    }


def steps_shown(view: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (s["effect_id"], s["sequence"], s["verb"], s["state"], s["has_compensation"], s["after"])
        for s in view["steps"]
    ]


async def test_a_submit_writes_no_step_row_and_each_step_is_read_from_its_plan_and_dispatches(
    store: StoreUnderTest,
) -> None:
    ok, fail = OutcomeClass.SUCCESS, OutcomeClass.PERMANENT
    step_rows = "SELECT count(*) FROM effectus_saga_steps"
    completes = store.submit(chain("p", "/id"), "completes")
    assert counts(store) == dict.fromkeys(("saga_instances", "saga_outbox", "saga_events"), 1) | {
        "saga_steps": 0,
        "saga_attempts": 0,
    }
    plan = store.view(completes)
    assert steps_shown(plan) == [
        ("s1", 0, "pay", "in_progress", True, []),
        ("s2", 1, "pay", "pending", True, ["s1"]),
        ("s3", 2, "pay", "pending", False, ["s2"]),
    ]

    daemon = await store.dispatch_store()
    for index in range(3):
        await step(daemon, ok, result={"id": index})
    view = store.view(completes)
    assert view["state"] == "completed"
    assert [(s["state"], s["result"], s["succeeded_order"]) for s in view["steps"]] == [
        ("succeeded", {"id": 0}, 1),
        ("succeeded", {"id": 1}, 2),
        ("succeeded", {"id": 2}, 3),
    ]
    for shown in view["steps"]:  # its arguments' hash its dispatch's, its pins the plan's
        forward = dispatch_in(view, shown["effect_id"])
        assert (shown["args_hash"], shown["contract_hash"]) == (
            forward["args_hash"],
            forward["contract_hash"],
        )

    compensates = store.submit(chain("p", "/id"), "compensates")
    for outcome in (ok, fail, ok):  # s1, s2 fails, s1's undo
        await step(daemon, outcome, result={"id": 9} if outcome is ok else None)
    view = store.view(compensates)
    assert view["state"] == "compensated"
    assert step_states(view) == {"s1": "compensated", "s2": "failed", "s3": "pending"}
    assert store.execute(step_rows) == [(0,)]  # every state so far said by a dispatch

    # s1's result has no /other: s2 fails at enqueue with no dispatch, its state on a row
    fails = store.submit(chain("q", "/other"), "fails-at-enqueue")
    await step(daemon, ok, result={"id": 3})
    view = store.view(fails)
    assert view["state"] == "compensating"
    assert step_states(view) == {"s1": "compensating", "s2": "failed", "s3": "pending"}
    assert view["steps"][1]["dispatches"] == []
    mark = "?" if store.sqlite else "%s"
    assert store.execute(
        f"SELECT effect_id, sequence, verb, state FROM effectus_saga_steps WHERE saga_id = {mark}",
        (fails,),
    ) == [("s2", 1, "pay", "failed")]  # its pins the plan's
    await step(daemon, ok)  # s1's undo
    view = store.view(fails)
    assert view["state"] == "compensated"
    assert step_states(view) == {"s1": "compensated", "s2": "failed", "s3": "pending"}
    assert store.execute(step_rows) == [(1,)]
