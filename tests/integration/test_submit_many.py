"""Client.submit_many on both stores: one transaction, a fixed number of statements, all or
nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from effectusd.client import AsyncClient, Submission
from effectusd.core.canonical import canonical_text
from effectusd.core.submission import SubmitConflict
from effectusd.store import operations
from tests.conftest import migrated_sqlite
from tests.support import backends
from tests.support.harness import client_for, fetch, make_config, serial_plan

PLAN = {**serial_plan("bulk", ["a", "b"]), "facts": {"amount": "integer"}}


def client(url: str) -> Any:
    return client_for(make_config("http://127.0.0.1:9", {"a": {}, "b": {}}), url)


def counts(url: str) -> tuple[int, int, int, int]:
    [row] = fetch(
        url,
        "SELECT (SELECT count(*) FROM effectus_saga_instances) AS sagas,"
        " (SELECT count(*) FROM effectus_saga_steps) AS steps,"
        " (SELECT count(*) FROM effectus_saga_outbox) AS dispatches,"
        " (SELECT count(*) FROM effectus_saga_events) AS events",
    )
    return row["sagas"], row["steps"], row["dispatches"], row["events"]


def batch(n: int, start: int = 0, amount: int = 1) -> list[Submission]:
    return [
        Submission(PLAN, f"bulk-{i}", facts={"amount": amount}) for i in range(start, start + n)
    ]


def test_a_batch_writes_every_saga_and_its_first_dispatch(store_url: str) -> None:
    results = client(store_url).submit_many(batch(40))
    assert [r.created for r in results] == [True] * 40
    assert len({r.saga_id for r in results}) == 40
    # no step row (a step is read from the plan), 1 dispatch, 1 event per saga (the
    # enqueue's entry is the outbox row)
    assert counts(store_url) == (40, 0, 40, 40)
    states = fetch(
        store_url, "SELECT state, count(*) AS n FROM effectus_saga_outbox GROUP BY state"
    )
    assert [(s["state"], s["n"]) for s in states] == [("queued", 40)]
    view = client(store_url).get(results[7].saga_id)
    assert view is not None and view.execution_id == "bulk-7" and view.state == "running"


def test_resubmitting_returns_the_existing_sagas_and_writes_nothing(store_url: str) -> None:
    first = client(store_url).submit_many(batch(10))
    before = counts(store_url)
    again = client(store_url).submit_many(batch(15))  # 10 known, 5 new
    assert [r.saga_id for r in again[:10]] == [r.saga_id for r in first]
    assert [r.created for r in again] == [False] * 10 + [True] * 5
    assert counts(store_url) == (before[0] + 5, before[1], before[2] + 5, before[3] + 5)


def test_one_conflict_refuses_the_whole_batch(store_url: str) -> None:
    client(store_url).submit_many(batch(3))
    before = counts(store_url)
    conflicting = [*batch(5, start=100), Submission(PLAN, "bulk-1", facts={"amount": 2})]
    with pytest.raises(SubmitConflict, match="facts differ"):
        client(store_url).submit_many(conflicting)
    assert counts(store_url) == before  # the 5 new ones were not written either


def test_the_same_saga_twice_in_a_batch_is_created_once_or_refused(store_url: str) -> None:
    one = {"amount": 1}
    twice = client(store_url).submit_many(
        [Submission(PLAN, "dup", facts=one), Submission(PLAN, "dup", facts=one)]
    )
    assert [r.created for r in twice] == [True, False]
    assert counts(store_url)[0] == 1
    with pytest.raises(SubmitConflict):
        client(store_url).submit_many(
            [Submission(PLAN, "dup-2", facts=one), Submission(PLAN, "dup-2", facts={"amount": 3})]
        )
    assert counts(store_url)[0] == 1


def test_the_batch_takes_the_same_statements_for_5_sagas_as_for_50(store_url: str) -> None:
    c = client(store_url)

    def statements(n: int, start: int) -> list[str]:
        rows = [c._prepare(s.plan, s.execution_id, s.facts) for s in batch(n, start=start)]
        names: list[str] = []
        operation = operations.submit_many(rows, "test", None)

        def counted() -> operations.Operation[Any]:
            query = next(operation)
            while True:
                names.append(query[0])
                try:
                    query = operation.send((yield query))
                except StopIteration as stop:
                    return stop.value

        with backends.connection(store_url) as conn:
            backends.run(conn, counted())
        return names

    assert statements(5, 0) == statements(50, 1000)


def test_a_batch_joined_to_a_rolled_back_transaction_leaves_nothing(store_url: str) -> None:
    with backends.connection(store_url) as conn:
        if backends.is_sqlite(store_url):
            conn.execute("BEGIN IMMEDIATE")
        else:
            conn.autocommit = False  # type: ignore[union-attr]
        client(store_url).submit_many(batch(4), conn=conn)
        conn.rollback()
    assert counts(store_url) == (0, 0, 0, 0)


async def test_the_async_client_submits_a_batch_too(store_url: str) -> None:
    config = make_config("http://127.0.0.1:9", {"a": {}, "b": {}})
    results = await AsyncClient(config, database_url=store_url).submit_many(batch(6))
    assert [r.created for r in results] == [True] * 6
    assert counts(store_url)[:3] == (6, 0, 6)


async def test_the_async_client_refuses_a_sqlite_connection_by_name(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    config = make_config("http://127.0.0.1:9", {"a": {}, "b": {}})
    with backends.connection(url) as conn:
        with pytest.raises(TypeError, match="not a Connection; on SQLite pass your sqlite3"):
            await AsyncClient(config, database_url=url).submit_many(batch(1), conn=conn)  # type: ignore[arg-type]
    assert counts(url) == (0, 0, 0, 0)


def test_a_batch_stores_every_text_byte_for_byte(store_url: str) -> None:
    """The rows of a batch travel as one JSON document on PostgreSQL: escapes, non-ASCII and
    characters outside the BMP (surrogate pairs in JSON) come back exactly as submitted."""
    noted = {
        "plan_id": "noted",
        "facts": {"note": "string"},
        "steps": [
            {"id": "a", "verb": "a", "args": {"note": {"$fact": "note"}}, "compensate": "none"}
        ],
    }
    notes = ['€ "quoted" \\ back\nslash', "😀 astral 𝄞", "tab\there \u2028 line sep", "plain"]
    results = client(store_url).submit_many(
        [Submission(noted, f"noted-{i}", facts={"note": note}) for i, note in enumerate(notes)]
    )
    rows = fetch(
        store_url,
        "SELECT s.execution_id, s.facts, o.args_canonical FROM effectus_saga_instances s"
        " JOIN effectus_saga_outbox o USING (saga_id) ORDER BY s.execution_id",
    )
    assert len(results) == len(rows) == len(notes)
    for row in rows:
        note = notes[int(row["execution_id"].split("-")[1])]
        facts = row["facts"] if isinstance(row["facts"], dict) else json.loads(row["facts"])
        assert facts == {"note": note}
        assert row["args_canonical"] == canonical_text({"note": note})
